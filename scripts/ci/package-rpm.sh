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
rpm=$(find "$top/RPMS" -name 'stagehand-[0-9]*.rpm' | head -n1)
[ -n "$rpm" ] || ci_die "rpmbuild made no stagehand RPM"
rpm -qpi "$rpm" | sed -n '/^Name/,/^Summary/p'
rpm -qpl "$rpm"
rpm -qpl "$rpm" | grep -q '/slurm/stagehand.so$' || ci_die "no plugin in $rpm"
cp "$rpm" "$build/"
ci_result "rpm: $(basename "$rpm") built from $(basename "$tarball")"
