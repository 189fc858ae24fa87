#!/usr/bin/env bash
# CI phase: build the RPM from the source tarball with packaging/rpm/stagehand.spec (Debian's
# rpmbuild; --nodeps since Debian has no RPM database of the build dependencies).
#   package-rpm.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=$(cd "${1:?usage: package-rpm.sh BUILD_DIR}" && pwd)
rm -f "$build"/stagehand-*.tar.gz
cmake --build "$build" --target package_source
tarball=$(ls "$build"/stagehand-*.tar.gz)
top=$(mktemp -d "${TMPDIR:-/tmp}/stagehand-rpm.XXXXXX")
trap 'rm -rf "$top"' EXIT
rpmbuild -bb --nodeps --define "_topdir $top" --define "_sourcedir $(dirname "$tarball")" \
  "$CI_ROOT/packaging/rpm/stagehand.spec"
rpm=$(find "$top/RPMS" -name 'stagehand-[0-9]*.rpm' -print -quit)
[ -n "$rpm" ] || ci_die "rpmbuild made no stagehand RPM"
rpm -qpi "$rpm" | sed -n '/^Name/,/^Summary/p'
# The list into a variable, then grep it: `rpm -qpl | grep -q` fails under pipefail whenever
# grep has quit at the match before rpm writes its next line (rpm writes a line at a time and
# dies of SIGPIPE; CI failed that way once).
files=$(rpm -qpl "$rpm")
echo "$files"
grep -q '/slurm/stagehand.so$' <<<"$files" || ci_die "no plugin in $rpm"
cp "$rpm" "$build/"
ci_result "rpm: $(basename "$rpm") built from $(basename "$tarball")"
