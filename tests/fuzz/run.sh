#!/usr/bin/env bash
# Builds the fuzz targets with clang (libFuzzer, ASan, UBSan) from CMake (STAGEHAND_FUZZ=ON) in
# BUILD_DIR/fuzz; for each target, first replays every input of its seed corpus (corpus/NAME: the
# inputs that once crashed it among them) once, then fuzzes from that corpus for a bounded time
# (SECONDS per target; 0: replay only), printing one line per target: inputs replayed,
# executions, and whether it found anything (then the input is kept).
# Usage: tests/fuzz/run.sh BUILD_DIR [SECONDS]     (CI: 10 s a target; longer runs: bench/fuzz.sh)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:?usage: run.sh BUILD_DIR [SECONDS]}/fuzz
seconds=${2:-30}
mkdir -p "$out"

cmake -S "$root" -B "$out" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DSTAGEHAND_FUZZ=ON -DSTAGEHAND_SANITIZE=address,undefined -DSTAGEHAND_BUILD_TESTS=OFF \
  -DSTAGEHAND_BUILD_EXAMPLES=OFF >"$out/configure.log" 2>&1 || { cat "$out/configure.log"; exit 1; }
cmake --build "$out" --target fuzz_targets -j"$(nproc)"

# libFuzzer flags from NAME_fuzz.options ([libfuzzer] key = value, as OSS-Fuzz writes them).
options_of() {
  local file=$here/$1_fuzz.options
  [ -f "$file" ] || return 0
  sed -n '/^\[libfuzzer\]/,/^\[/{s/^\([a-z_]*\) *= *\(.*\)$/-\1=\2/p}' "$file"
}

status=0
while read -r name; do
  [ -n "$name" ] || continue
  corpus=$out/corpus/$name
  rm -rf "$corpus" && mkdir -p "$corpus"
  [ -d "$here/corpus/$name" ] && cp -r "$here/corpus/$name/." "$corpus/"
  log=$out/$name.log
  inputs=$(find "$corpus" -type f | wc -l)
  rc=0
  # The replay: each input once (-runs=0 with a corpus directory runs exactly its files).
  "$out/tests/fuzz/${name}_fuzz" -runs=0 $(options_of "$name") "$corpus" >"$log.replay" 2>&1 || rc=$?
  if [ "$rc" -ne 0 ]; then
    tail -n 40 "$log.replay"
    echo "fuzz: $name: replaying its corpus ($inputs inputs) failed (exit $rc)" >&2
    status=1
    continue
  fi
  if [ "$seconds" -eq 0 ]; then
    echo "fuzz: $name: $inputs corpus inputs replayed, no finding"
    continue
  fi
  # shellcheck disable=SC2046 # one flag per line
  "$out/tests/fuzz/${name}_fuzz" -max_total_time="$seconds" $(options_of "$name") -print_final_stats=1 \
    -artifact_prefix="$out/$name-" "$corpus" >"$log" 2>&1 || rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n1)
  if [ "$rc" -ne 0 ]; then
    tail -n 40 "$log"
    echo "fuzz: $name found a failure (exit $rc) after ${execs:-?} executions; the input is in $out/" >&2
    status=1
  else
    echo "fuzz: $name: $inputs corpus inputs replayed, ${execs:-?} executions in ${seconds}s, no finding"
  fi
done <"$out/tests/fuzz/targets.txt"
exit "$status"
