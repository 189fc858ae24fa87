#!/usr/bin/env bash
# A cache fill's seal (cache::take_over, what the daemon does before it publishes an entry: every
# name made root's without group/other write or set-id bits, and the tree measured) against the
# shell's way to the same end: `chown -R 0:0 D && chmod -R go-w,ug-s D && du -sB1 D`. FILES (default
# 60,000) 2 KiB files, 1,000 per directory, on tmpfs, given to nobody before each run (untimed);
# ROUNDS (default 5) interleaved; medians and the ratio. Usage (root): bench/seal.sh BUILD_DIR [ROUNDS] [FILES]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
tool=$(cd "${1:?usage: seal.sh BUILD_DIR [ROUNDS] [FILES]}" && pwd)/bench/stage_tool
rounds=${2:-5}
files=${3:-60000}
[ -x "$tool" ] || { echo "build first: $tool missing" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "seal.sh: run as root (it changes owners)" >&2; exit 1; }
work=$(mktemp -d /dev/shm/stagehand-seal.XXXXXX)
trap 'rm -rf "$work"' EXIT
bench_small_tree "$work/t/data" "$files"

# KEY COMMAND ($D the tree): the tree given to nobody first, then COMMAND timed; every file root's after.
seal_run() {
  chown -R nobody:nogroup "$work/t" && chmod -R u+w,g+w "$work/t"
  bench_time "$1" env D="$work/t" T="$tool" bash -c "$2 >/dev/null"
  if [ -n "$(find "$work/t" ! -uid 0 -print -quit)" ]; then
    echo "seal.sh: $1 left a name that is not root's" >&2
    exit 1
  fi
}
keys=(chown-chmod-du stagehand)
declare -A cmds=(
  [chown-chmod-du]='chown -R 0:0 $D && chmod -R go-w,ug-s $D && du -sB1 $D'
  [stagehand]='$T take-over $D'
)
for _ in $(seq 1 "$rounds"); do
  for key in "${keys[@]}"; do seal_run "$key" "${cmds[$key]}"; done
done
echo "seal on tmpfs, $(printf "%'d" "$files") x 2 KiB files ($(nproc) cores), median of $rounds interleaved runs"
b=$(bench_median chown-chmod-du)
for key in "${keys[@]}"; do
  s=$(bench_median "$key")
  printf '  %-16s %s s   x%s of chown-chmod-du\n' "$key" "$s" "$(bench_ratio "$s" "$b")"
done
