#!/usr/bin/env bash
# Unpack speed on tmpfs, against the tools users would otherwise use, in the same run:
#   - 60,000 x 2 KiB files in a tar: stagehand (writer threads / one writer) vs GNU tar, bsdtar
#   - the same tree as tar.gz and tar.zst: vs `tar -xzf` and `zstd -dc | tar -x`
# Each command runs ROUNDS times (default 5), interleaved; the median is reported and every
# ratio is against GNU tar on the same archive. Usage: bench/unpack.sh BUILD_DIR [ROUNDS]
set -euo pipefail
tool=$(cd "${1:?usage: unpack.sh BUILD_DIR [ROUNDS]}" && pwd)/bench/stage_tool
rounds=${2:-5}
[ -x "$tool" ] || { echo "build first: $tool missing" >&2; exit 1; }
work=$(mktemp -d /dev/shm/stagehand-unpack.XXXXXX)
trap 'rm -rf "$work"' EXIT

python3 - "$work/src" <<'PY'
import os, sys
root = sys.argv[1]
data = os.urandom(2048)
for d in range(60):
    os.makedirs(f"{root}/d{d:02d}")
    for i in range(1000):
        with open(f"{root}/d{d:02d}/f{i:04d}", "wb") as f:
            f.write(data[i % 7:] + data[: i % 7])
PY
(cd "$work/src" && tar cf "$work/small.tar" . && tar czf "$work/small.tar.gz" . && tar --zstd -cf "$work/small.tar.zst" .)

declare -A cmds=(
  [tar:gnu-tar]='tar xf $A -C $D'
  [tar:bsdtar]='bsdtar xf $A -C $D'
  [tar:stagehand]='$T unpack $A $D'
  [tar:stagehand-1-writer]='$T unpack $A $D 1'
  [gz:gnu-tar]='tar xzf $A -C $D'
  [gz:stagehand]='$T unpack $A $D'
  [zst:zstd-pipe-tar]='zstd -dcq $A | tar xf - -C $D'
  [zst:stagehand]='$T unpack $A $D'
)
declare -A archive=([tar]=small.tar [gz]=small.tar.gz [zst]=small.tar.zst)
declare -A times=()
for r in $(seq 1 "$rounds"); do
  for key in "${!cmds[@]}"; do
    kind=${key%%:*}
    A=$work/${archive[$kind]} D=$work/out T=$tool
    rm -rf "$D"; mkdir "$D"
    t0=$(date +%s%N)
    A=$A D=$D T=$T bash -c "${cmds[$key]}"
    t1=$(date +%s%N)
    times[$key]+="$(( (t1 - t0) / 1000 )) "
    if [ "$r" = 1 ] && ! diff -rq "$work/src" "$D" >/dev/null; then
      echo "unpack.sh: $key produced a different tree" >&2; exit 1
    fi
  done
done

python3 - "$rounds" <<PY
import statistics, sys
raw = """$(for k in "${!times[@]}"; do echo "$k ${times[$k]}"; done)"""
med = {}
for line in raw.strip().splitlines():
    key, *us = line.split()
    med[key] = statistics.median(int(u) for u in us) / 1e6
print(f"unpack on tmpfs, 60,000 x 2 KiB files, median of {sys.argv[1]} interleaved runs")
for kind, base in (("tar", "tar:gnu-tar"), ("gz", "gz:gnu-tar"), ("zst", "zst:zstd-pipe-tar")):
    for key in sorted(k for k in med if k.startswith(kind + ":")):
        print(f"  {key:24s} {med[key]:6.3f} s   x{med[key] / med[base]:5.2f} of {base}")
PY
