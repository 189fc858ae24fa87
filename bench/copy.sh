#!/usr/bin/env bash
# Copy speed on tmpfs, against the tools users would otherwise use, in the same run:
#   - one 2 GiB file: stagehand's copy_file vs `cat SRC > DST` (target: >= 0.9x cat's bandwidth)
#   - a tree of 60,000 x 2 KiB files in 60 directories: stagehand's copy_tree vs `cp -a`
# Median of ROUNDS interleaved runs (default 5). Usage: bench/copy.sh BUILD_DIR [ROUNDS]
set -euo pipefail
tool=$(cd "${1:?usage: copy.sh BUILD_DIR [ROUNDS]}" && pwd)/bench/stage_tool
rounds=${2:-5}
[ -x "$tool" ] || { echo "build first: $tool missing" >&2; exit 1; }
work=$(mktemp -d /dev/shm/stagehand-copy.XXXXXX)
trap 'rm -rf "$work"' EXIT
head -c $((2 << 30)) /dev/urandom >"$work/big.bin"
python3 - "$work/tree" <<'PY'
import os, sys
root = sys.argv[1]
data = os.urandom(2048)
for d in range(60):
    os.makedirs(f"{root}/d{d:02d}")
    for i in range(1000):
        with open(f"{root}/d{d:02d}/f{i:04d}", "wb") as f:
            f.write(data)
PY

declare -A times=()
run() { # key command...
  local key=$1; shift
  rm -rf "$work/out"; mkdir "$work/out"
  local t0 t1; t0=$(date +%s%N); "$@"; t1=$(date +%s%N)
  times[$key]+="$(( (t1 - t0) / 1000 )) "
}
for r in $(seq 1 "$rounds"); do
  run file:cat bash -c "cat '$work/big.bin' > '$work/out/big.bin'"
  run file:stagehand "$tool" copy-file "$work/big.bin" "$work/out" big.bin
  [ "$r" = 1 ] && cmp "$work/big.bin" "$work/out/big.bin"
  run tree:cp-a cp -a "$work/tree/." "$work/out/"
  run tree:stagehand "$tool" copy-tree "$work/tree" "$work/out"
  [ "$r" = 1 ] && diff -r "$work/tree" "$work/out" >/dev/null
done

python3 - "$rounds" <<PY
import statistics, sys
raw = """$(for k in "${!times[@]}"; do echo "$k ${times[$k]}"; done)"""
med = {}
for line in raw.strip().splitlines():
    key, *us = line.split()
    med[key] = statistics.median(int(u) for u in us) / 1e6
gib = 2.0
print(f"copy on tmpfs, median of {sys.argv[1]} interleaved runs")
print(f"  2 GiB file   cat        {med['file:cat']:6.3f} s  {gib / med['file:cat']:5.2f} GiB/s")
print(f"  2 GiB file   stagehand  {med['file:stagehand']:6.3f} s  {gib / med['file:stagehand']:5.2f} GiB/s"
      f"   bandwidth x{med['file:cat'] / med['file:stagehand']:4.2f} of cat (target >= 0.9)")
print(f"  60k files    cp -a      {med['tree:cp-a']:6.3f} s")
print(f"  60k files    stagehand  {med['tree:stagehand']:6.3f} s   time x{med['tree:stagehand'] / med['tree:cp-a']:4.2f} of cp -a")
PY
