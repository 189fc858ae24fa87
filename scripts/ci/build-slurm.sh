#!/usr/bin/env bash
# Builds a Slurm release once per machine and prints its install prefix on stdout.
#
#   build-slurm.sh [VERSION]   default 25.11.7; the releases are those in scripts/slurm-sources.txt
#
# Sources, pinned by sha256 in scripts/slurm-sources.txt (never by a checksum file beside them):
# - from the directory STAGEHAND_SLURM_SOURCES (default: <repo>/../shared/slurm where that
#   exists) when it holds the release's file, which must match the pinned sha256: a mismatch
#   stops the build, with no fallback;
# - otherwise SchedMD's tarball from its URL (curl or wget), kept in STAGEHAND_CI_CACHE/downloads
#   and checked against the URL's pinned sha256 (or STAGEHAND_SLURM_SHA256 where none is pinned).
# stderr says which: "Slurm sources: PATH (local directory)" or "... (downloaded from URL)".
#
# The build is installed under STAGEHAND_CI_CACHE (default /var/cache/stagehand-ci)/slurm-<sha256
# of the tarball>, so a later run with the same sources finds it there and skips the ~3.5 minute
# build. A prefix counts as built only once its `.complete` marker exists (an interrupted build is
# redone); one builder at a time per prefix (flock). Run as root.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
root=$CI_ROOT
release=${1:-25.11.7}
cache=${STAGEHAND_CI_CACHE:-/var/cache/stagehand-ci}
pins=$root/scripts/slurm-sources.txt

log() { echo "build-slurm: $*" >&2; }
die() {
  echo "build-slurm: error: $*" >&2
  ci_summary_line "  build-slurm.sh: $*"
  exit 1
}
sha256_of() { sha256sum "$1" | cut -d' ' -f1; }
is_sha256() { [[ $1 =~ ^[0-9a-f]{64}$ ]]; }

# The release's line: VERSION LOCAL-FILE LOCAL-SHA256 URL URL-SHA256.
[ -f "$pins" ] || die "no $pins"
read -r _ local_name local_sha url url_sha extra < <(awk -v v="$release" '$1 == v && $1 !~ /^#/' "$pins") ||
  die "Slurm $release is not in $pins (it has: $(awk '!/^#/ && NF { printf "%s ", $1 }' "$pins"))"
[ -n "$url_sha" ] && [ -z "${extra:-}" ] && is_sha256 "$local_sha" || die "$pins: malformed line for $release"
url_name=$(basename "$url")
url_sha_from="pinned in scripts/slurm-sources.txt"
if [ "$url_sha" = - ]; then
  url_sha=${STAGEHAND_SLURM_SHA256:-}
  url_sha_from="given in STAGEHAND_SLURM_SHA256"
elif [ -n "${STAGEHAND_SLURM_SHA256:-}" ] && [ "$STAGEHAND_SLURM_SHA256" != "$url_sha" ]; then
  die "STAGEHAND_SLURM_SHA256 differs from the sha256 $pins pins for $url_name"
fi
[ -z "$url_sha" ] || is_sha256 "$url_sha" || die "the sha256 given for $url_name is not 64 lowercase hex digits"

# check FILE EXPECTED WHERE: the file's sha256 against the expected one; one line and exit if not.
check() {
  local actual
  actual=$(sha256_of "$1")
  [ "$actual" = "$2" ] || die "$1: sha256 $actual is not the $2 $3: refusing it"
}
need_url_sha() {
  [ -n "$url_sha" ] || die "no sha256 pinned for $url_name (scripts/slurm-sources.txt: SchedMD publishes sha1 only), so it is not used unchecked: put $local_name in STAGEHAND_SLURM_SOURCES, or give STAGEHAND_SLURM_SHA256 after checking the tarball yourself"
}

if [ -n "${STAGEHAND_SLURM_SOURCES:-}" ]; then
  sources=$STAGEHAND_SLURM_SOURCES
  [ -d "$sources" ] || die "STAGEHAND_SLURM_SOURCES=$sources is not a directory"
elif [ -d "$root/../shared/slurm" ]; then
  sources=$(cd "$root/../shared/slurm" && pwd)
else
  sources=
fi

if [ -n "$sources" ] && [ -f "$sources/$local_name" ]; then
  tarball=$sources/$local_name
  check "$tarball" "$local_sha" "pinned in scripts/slurm-sources.txt"
  log "Slurm sources: $tarball (local directory)"
elif [ -n "$sources" ] && [ -f "$sources/$url_name" ]; then
  tarball=$sources/$url_name
  need_url_sha
  check "$tarball" "$url_sha" "$url_sha_from"
  log "Slurm sources: $tarball (local directory)"
else
  log "no $local_name${sources:+ in $sources}: using $url"
  need_url_sha
  mkdir -p "$cache/downloads"
  tarball=$cache/downloads/$url_name
  exec 8>"$tarball.lock"
  flock 8
  if [ -f "$tarball" ]; then
    check "$tarball" "$url_sha" "$url_sha_from"
    log "Slurm sources: $tarball (downloaded from $url earlier)"
  else
    rm -f "$tarball.partial"
    if command -v curl >/dev/null; then
      curl -fsSL --retry 3 -o "$tarball.partial" "$url" ||
        { status=$?; rm -f "$tarball.partial"; die "could not download $url (curl exit $status)"; }
    elif command -v wget >/dev/null; then
      wget -q --tries=3 -O "$tarball.partial" "$url" ||
        { status=$?; rm -f "$tarball.partial"; die "could not download $url (wget exit $status)"; }
    else
      die "neither curl nor wget to download $url (scripts/install-deps.sh installs curl)"
    fi
    got=$(sha256_of "$tarball.partial")
    [ "$got" = "$url_sha" ] || { rm -f "$tarball.partial"; die "$url: sha256 $got is not the $url_sha $url_sha_from: refusing it"; }
    mv "$tarball.partial" "$tarball"
    log "Slurm sources: $tarball (downloaded from $url)"
  fi
  exec 8>&-
fi
name=$(basename "$tarball")
actual=$(sha256_of "$tarball")

prefix=$cache/slurm-$actual
mkdir -p "$cache"
# One builder at a time per machine; the others wait and then find the finished prefix.
exec 9>"$cache/slurm-$actual.lock"
flock 9
if [ -f "$prefix/.complete" ]; then
  log "cached: $prefix ($(cat "$prefix/.complete"))"
  ci_result "$name: cached build in $prefix"
  echo "$prefix"
  exit 0
fi

log "building $name into $prefix (not cached yet)"
rm -rf "$prefix"
work=$(mktemp -d "${TMPDIR:-/tmp}/stagehand-slurm-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar -xf "$tarball" -C "$work"
src=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n1)
start=$SECONDS
(
  cd "$src"
  # --enable-multiple-slurmd: the test cluster runs two slurmd on one host (NodeHostname=localhost).
  ./configure --prefix="$prefix" --sysconfdir="$prefix/etc" \
    --enable-multiple-slurmd --disable-dependency-tracking --disable-static >"$work/configure.log" 2>&1 ||
    { tail -n 40 "$work/configure.log" >&2; exit 1; }
  make -j"$(nproc)" >"$work/make.log" 2>&1 || { tail -n 60 "$work/make.log" >&2; exit 1; }
  make install >"$work/install.log" 2>&1 || { tail -n 40 "$work/install.log" >&2; exit 1; }
)
[ -x "$prefix/sbin/slurmctld" ] && [ -f "$prefix/include/slurm/spank.h" ] || die "install in $prefix is incomplete"
echo "$name built in $((SECONDS - start))s on $(date -u +%FT%TZ)" >"$prefix/.complete"
log "built in $((SECONDS - start))s: $prefix"
ci_result "$name: built in $((SECONDS - start))s (not cached yet), installed in $prefix"
echo "$prefix"
