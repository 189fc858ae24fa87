#!/usr/bin/env bash
# Copy speed on tmpfs, against the tools users would otherwise use, in the same run:
#   - one 2 GiB file: stagehand's copy_file vs `cat SRC > DST` (target: >= 0.9x cat's bandwidth)
#   - a tree of 60,000 x 2 KiB files in 60 directories: stagehand's copy_tree vs `cp -a`
# Median of ROUNDS interleaved runs (default 5). Usage: bench/copy.sh BUILD_DIR [ROUNDS]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
tool=$(cd "${1:?usage: copy.sh BUILD_DIR [ROUNDS]}" && pwd)/bench/stage_tool
rounds=${2:-5}
[ -x "$tool" ] || { echo "build first: $tool missing" >&2; exit 1; }
work=$(mktemp -d /dev/shm/stagehand-copy.XXXXXX)
trap 'rm -rf "$work"' EXIT
head -c $((2 << 30)) /dev/urandom >"$work/big.bin"
bench_small_tree "$work/tree"

fresh() { rm -rf "$work/out" && mkdir "$work/out"; }
for r in $(seq 1 "$rounds"); do
  fresh; bench_time file:cat bash -c "cat '$work/big.bin' > '$work/out/big.bin'"
  fresh; bench_time file:stagehand "$tool" copy-file "$work/big.bin" "$work/out" big.bin
  [ "$r" = 1 ] && cmp "$work/big.bin" "$work/out/big.bin"
  fresh; bench_time tree:cp-a cp -a "$work/tree/." "$work/out/"
  fresh; bench_time tree:stagehand "$tool" copy-tree "$work/tree" "$work/out"
  [ "$r" = 1 ] && diff -r "$work/tree" "$work/out" >/dev/null
done

cat_s=$(bench_median file:cat) sh_s=$(bench_median file:stagehand)
cp_s=$(bench_median tree:cp-a) tree_s=$(bench_median tree:stagehand)
echo "copy on tmpfs, median of $rounds interleaved runs"
echo "  2 GiB file   cat        $cat_s s   $(bench_ratio 2 "$cat_s") GiB/s"
echo "  2 GiB file   stagehand  $sh_s s   $(bench_ratio 2 "$sh_s") GiB/s   bandwidth x$(bench_ratio "$cat_s" "$sh_s") of cat (target >= 0.9)"
echo "  60k files    cp -a      $cp_s s"
echo "  60k files    stagehand  $tree_s s   time x$(bench_ratio "$tree_s" "$cp_s") of cp -a"
