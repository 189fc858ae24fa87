#!/usr/bin/env bash
# CI phase: build the .deb with CPack from a build directory configured with the default
# CMAKE_INSTALL_PREFIX (/usr/local), and check it without installing: file list, lintian (no
# errors; warnings are printed), the unit under systemd-analyze, the man pages under man -l.
#   package-deb.sh BUILD_DIR        prints nothing else; the .deb is left in BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=$(cd "${1:?usage: package-deb.sh BUILD_DIR}" && pwd)

rm -f "$build"/stagehand_*.deb
cmake --build "$build" --target package
deb=$(ls "$build"/stagehand_*.deb)
[ "$(echo "$deb" | wc -l)" -eq 1 ] || ci_die "expected one .deb in $build, got: $deb"
ci_log "$(basename "$deb")"
dpkg-deb --info "$deb" | sed -n '/Package:/,$p'
dpkg-deb --contents "$deb"

# The layout the admin docs promise, whatever prefix the build had.
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
listing=$(dpkg-deb --contents "$deb" | awk '{print $NF}' | sed 's|^\./|/|')
for f in "/usr/lib/$arch/slurm-wlm/stagehand.so" /usr/bin/stagehand /usr/sbin/stagehandd \
  /lib/systemd/system/stagehandd.service /usr/lib/sysusers.d/stagehand.conf /usr/lib/tmpfiles.d/stagehand.conf \
  /etc/slurm/stagehand.toml /etc/slurm/plugstack.conf.d/stagehand.conf /usr/share/man/man1/stagehand.1.gz \
  /usr/share/man/man5/stagehand.toml.5.gz /usr/share/man/man8/stagehandd.8.gz; do
  grep -qx "$f" <<<"$listing" || ci_die "$f missing from $(basename "$deb")"
done
if grep -q '^/usr/local' <<<"$listing"; then ci_die "the .deb installs under /usr/local"; fi
control=$(dpkg-deb --ctrl-tarfile "$deb" | tar -tf -)
grep -qx './conffiles' <<<"$control" || ci_die "no conffiles"

# lintian: errors fail, warnings are listed.
lintian_log=$(mktemp)
trap 'rm -f "$lintian_log"' EXIT
lintian --fail-on error --info "$deb" | tee "$lintian_log" || ci_die "lintian found errors"
warnings=$(grep -c '^W: ' "$lintian_log" || true)

# The unit and the man pages, from the package's own files.
x=$(mktemp -d)
trap 'rm -f "$lintian_log"; rm -rf "$x"' EXIT
dpkg-deb -x "$deb" "$x"
# (printed from a variable: `tee /dev/stderr` reopens stderr, and where that is a file, as a CI
# log is, it truncates the file, and the earlier phases' output was lost)
security=$(systemd-analyze security --offline=true --root="$x" stagehandd.service 2>&1)
echo "$security"
exposure=$(sed -n 's/.*Overall exposure level for stagehandd.service: \([0-9.]*\) \([A-Z]*\).*/\1 \2/p' <<<"$security")
[ -n "$exposure" ] || ci_die "systemd-analyze security printed no exposure"
awk -v e="${exposure%% *}" 'BEGIN { exit !(e <= 3.5) }' || ci_die "exposure $exposure is above 3.5"
for page in "$x"/usr/share/man/man*/*.gz; do
  out=$(MANWIDTH=100 man --warnings -E UTF-8 -l "$page" 2>&1 >/dev/null) || ci_die "man -l $page failed"
  [ -z "$out" ] || ci_die "man -l $(basename "$page") warns: $out"
  page_text=$(MANWIDTH=100 man -l "$page" 2>/dev/null)
  head -n 3 <<<"$page_text" # (not man | head: under pipefail man's SIGPIPE would fail the phase)
done
ci_result "package: $(basename "$deb"), lintian 0 errors $warnings warnings, systemd-analyze security $exposure, man pages render"
