#!/usr/bin/env bash
# How the extractor's gain over GNU tar follows the cores it may use, on tmpfs: 60,000 x 2 KiB
# files in a tar (FILES to change), unpacked by stage_tool (the engine --stage-data runs) with its
# default writer threads (one per core it may use, at most 4), with none (the reader writes
# everything), 2 and 8, and by `tar --no-same-owner -xf`; then both again limited by taskset to 2
# and to 3 of the cores (where the machine has them). ROUNDS (default 9) interleaved rounds; prints
# medians and stagehand / tar for the same cores. Usage: bench/cores.sh BUILD_DIR [ROUNDS] [FILES]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
tool=$(cd "${1:?usage: cores.sh BUILD_DIR [ROUNDS] [FILES]}" && pwd)/bench/stage_tool
rounds=${2:-9}
files=${3:-60000}
[ -x "$tool" ] || { echo "build first: $tool missing" >&2; exit 1; }
work=$(mktemp -d /dev/shm/stagehand-cores.XXXXXX)
trap 'rm -rf "$work"' EXIT
bench_small_tree "$work/src" "$files"
tar -C "$work/src" -cf "$work/a.tar" .

cores=$(nproc)
# KEY=COMMAND ($A the archive, $D the destination, $T stage_tool); a key ending in @N runs on N cores.
cmds=("tar=tar --no-same-owner -xf \$A -C \$D" "stagehand=\$T unpack \$A \$D"
      "stagehand-no-writers=\$T unpack \$A \$D 1" "stagehand-2-writers=\$T unpack \$A \$D 2"
      "stagehand-8-writers=\$T unpack \$A \$D 8")
for n in 2 3; do
  if [ "$cores" -gt "$n" ]; then
    cmds+=("tar@$n=taskset -c 1-$n tar --no-same-owner -xf \$A -C \$D" "stagehand@$n=taskset -c 1-$n \$T unpack \$A \$D")
  fi
done
for r in $(seq 1 "$rounds"); do
  for kv in "${cmds[@]}"; do
    bench_unpack "${kv%%=*}" "$work/a.tar" "${kv#*=}" "$([ "$r" != 1 ] || echo "$work/src")"
  done
done

echo "unpack on tmpfs, $files x 2 KiB files, $cores cores, median of $rounds interleaved runs"
for kv in "${cmds[@]}"; do
  key=${kv%%=*}
  base=tar
  [[ $key != *@* ]] || base=tar@${key#*@}
  printf '  %-22s %s s   x%s of %s\n' "$key" "$(bench_median "$key")" \
    "$(bench_ratio "$(bench_median "$key")" "$(bench_median "$base")")" "$base"
done
