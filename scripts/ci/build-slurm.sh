#!/usr/bin/env bash
# Builds Slurm from the shared source tarball once per machine and prints its install prefix.
#
#   build-slurm.sh [TARBALL]   default: <repo>/../shared/slurm/slurm-25.11.7.tar.xz
#
# The tarball is checked against the SHA256SUMS beside it; the build is installed under
# STAGEHAND_CI_CACHE (default /var/cache/stagehand-ci)/slurm-<sha256>, so a later run with the
# same tarball finds it there and skips the ~3.5 minute build. A prefix counts as built only
# once its `.complete` marker exists (an interrupted build is redone). Run as root.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
root=$CI_ROOT
tarball=${1:-$root/../shared/slurm/slurm-25.11.7.tar.xz}
cache=${STAGEHAND_CI_CACHE:-/var/cache/stagehand-ci}

log() { echo "build-slurm: $*" >&2; }
die() { echo "build-slurm: error: $*" >&2; exit 1; }

[ -f "$tarball" ] || die "no Slurm source at $tarball (expected the shared tarball beside the repository)"
sums=$(dirname "$tarball")/SHA256SUMS
[ -f "$sums" ] || die "no $sums to verify $tarball against"
name=$(basename "$tarball")
expected=$(awk -v n="$name" '$2 == n || $2 == "*" n { print $1 }' "$sums")
[ -n "$expected" ] || die "$sums has no line for $name"
actual=$(sha256sum "$tarball" | cut -d' ' -f1)
[ "$actual" = "$expected" ] || die "$name: sha256 $actual does not match $expected in $sums"

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
