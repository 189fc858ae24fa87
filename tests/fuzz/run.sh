#!/usr/bin/env bash
# Builds the fuzz targets with clang (libFuzzer, ASan, UBSan) and runs each for a bounded time.
# Usage: tests/fuzz/run.sh BUILD_DIR [SECONDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: run.sh BUILD_DIR [SECONDS]}/fuzz
seconds=${2:-30}
mkdir -p "$out/corpus"
clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/src" "$root/src/stagehand/util/result.cpp" "$root/src/stagehand/util/strings.cpp" \
  "$root/src/stagehand/ddp/hostlist.cpp" \
  "$here/hostlist_fuzz.cpp" -o "$out/hostlist_fuzz"
cp -r "$here/corpus/hostlist" "$out/corpus/"
status=0
"$out/hostlist_fuzz" -max_total_time="$seconds" -max_len=256 -print_final_stats=1 -artifact_prefix="$out/" \
  "$out/corpus/hostlist" >"$out/hostlist.log" 2>&1 || status=$?
grep -E '^Done|number_of_executed_units' "$out/hostlist.log" || true
if [ "$status" -ne 0 ]; then
  tail -n 40 "$out/hostlist.log"
  echo "fuzz: hostlist found a failure (exit $status); the input is in $out/" >&2
  exit 1
fi
echo "fuzz: hostlist ran ${seconds}s without a finding"
