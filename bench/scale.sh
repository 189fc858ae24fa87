#!/usr/bin/env bash
# How staging's cost grows, on one node, on tmpfs: stagehand's engine (bench/stage_tool, what
# --stage-data runs on each node) against the tool a user would run, in the same run, interleaved:
#   60,000 and 600,000 x 2 KiB files in a tar     unpack      vs  tar -xf
#   1 GiB and 8 GiB tars of 128 MiB / 1 GiB files  unpack      vs  tar -xf
#   the 1 GiB tar as a file (--stage-data=X.tar:X.tar with unpack off)   copy  vs  cp, cat >
#   16 x 64 MiB shards (a directory)               copy        vs  cp -r
# and prints the medians, stagehand / tool, and the cost per file (us) and per byte (GB/s). tar
# runs as a user's would (--no-same-owner: root's would chown every file, which stagehand never does).
# The 8 GiB case runs once per tool and only when tmpfs has room for it twice (the archive and
# one unpacked copy). Cluster-level figures (srun end to end, two nodes) come from stage_e2e.sh
# and broadcast.sh.   Usage: bench/scale.sh BUILD_DIR [ROUNDS]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
tool=$(cd "${1:?usage: scale.sh BUILD_DIR [ROUNDS]}" && pwd)/bench/stage_tool
rounds=${2:-3}
[ -x "$tool" ] || { echo "build first: $tool missing" >&2; exit 1; }
work=$(mktemp -d /dev/shm/stagehand-scale.XXXXXX)
trap 'rm -rf "$work"' EXIT
declare -A files bytes

# case NAME ROUNDS SOURCE: each of the commands in the global `cmds` (KEY=COMMAND, with $S the
# source, $D a fresh empty destination, $T stage_tool), interleaved, ROUNDS times.
run_case() {
  local name=$1 n=$2 src=$3 r kv key
  for r in $(seq 1 "$n"); do
    for kv in "${cmds[@]}"; do
      key=$name:${kv%%=*}
      rm -rf "$work/out" && mkdir "$work/out"
      sync
      bench_time "$key" env S="$src" D="$work/out" T="$tool" bash -c "${kv#*=}"
    done
  done
  rm -rf "$work/out"
}

small_tar() { # FILES
  bench_small_tree "$work/tree" "$1"
  tar -C "$work/tree" -cf "$work/small-$1.tar" .
  rm -rf "$work/tree"
  files[small-$1]=$1 bytes[small-$1]=$(($1 * 2048))
}
big_tar() { # NAME PARTS PART_MIB
  mkdir -p "$work/big"
  for i in $(seq 1 "$2"); do head -c "$(($3 << 20))" /dev/urandom >"$work/big/part$i.bin"; done
  tar -C "$work/big" -cf "$work/$1.tar" .
  rm -rf "$work/big"
  files[$1]=$2 bytes[$1]=$(($2 * $3 << 20))
}

cmds=("tar=tar --no-same-owner -xf \$S -C \$D" "stagehand=\$T unpack \$S \$D")
for n in 60000 600000; do
  small_tar "$n"
  run_case "small-$n" "$rounds" "$work/small-$n.tar"
  rm -f "$work/small-$n.tar"
done
big_tar big-1g 8 128
run_case big-1g "$rounds" "$work/big-1g.tar"
cmds=("cp=cp \$S \$D/x.tar" "cat=cat \$S >\$D/x.tar" "stagehand=\$T copy-file \$S \$D x.tar")
files[copy-1g]=1 bytes[copy-1g]=${bytes[big-1g]}
run_case copy-1g "$rounds" "$work/big-1g.tar"
rm -f "$work/big-1g.tar"

mkdir -p "$work/shards"
for i in $(seq -w 1 16); do head -c 64M /dev/urandom >"$work/shards/shard-$i.bin"; done
files[shards]=16 bytes[shards]=$((16 * 64 << 20))
cmds=("cp=cp -r \$S/. \$D" "stagehand=\$T copy-tree \$S \$D")
run_case shards "$rounds" "$work/shards"
rm -rf "$work/shards"

avail_kib=$(df --output=avail -k /dev/shm | tail -1)
if [ "$avail_kib" -gt $((17 << 20)) ]; then
  big_tar big-8g 8 1024
  cmds=("tar=tar --no-same-owner -xf \$S -C \$D" "stagehand=\$T unpack \$S \$D")
  run_case big-8g 1 "$work/big-8g.tar"
  rm -f "$work/big-8g.tar"
else
  echo "scale.sh: $((avail_kib >> 20)) GiB free on /dev/shm: the 8 GiB case needs 17, skipped" >&2
fi

echo "staging cost by size on tmpfs, one node, median of $rounds interleaved runs (8 GiB: one run):"
printf '  %-22s %-10s %9s %8s %10s %9s\n' case tool seconds ratio us/file GB/s
for c in small-60000 small-600000 big-1g copy-1g shards big-8g; do
  [ -n "${files[$c]:-}" ] && [ -n "${BENCH_TIMES[$c:stagehand]:-}" ] || continue
  s=$(bench_median "$c:stagehand")
  for key in "${!BENCH_TIMES[@]}"; do
    [ "${key%%:*}" = "$c" ] || continue
    t=$(bench_median "$key")
    awk -v c="$c" -v k="${key#*:}" -v t="$t" -v s="$s" -v f="${files[$c]}" -v b="${bytes[$c]}" 'BEGIN {
      printf "  %-22s %-10s %9.3f %8s %10.2f %9.2f\n", c, k, t, (k == "stagehand" ? "" : sprintf("x%.2f", s / t)), t * 1e6 / f, b / t / 1e9 }'
  done | sort -k2,2r
done
echo "  (ratio: stagehand / that tool; us/file and GB/s: that row's time per file and bytes per second)"
