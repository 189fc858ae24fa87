#!/usr/bin/env bash
# CI phase: every fuzz target (tests/fuzz: hostlist, stage_spec, options, config, protocol,
# extract): its seed corpus replayed, then STAGEHAND_FUZZ_SECONDS (default 10) of fuzzing from it.
# The long runs are bench/fuzz.sh's (600 s a target).
#   fuzz.sh BUILD_DIR
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=${1:?usage: fuzz.sh BUILD_DIR}
seconds=${STAGEHAND_FUZZ_SECONDS:-10}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
"$CI_ROOT/tests/fuzz/run.sh" "$build" "$seconds" 2>&1 | tee "$log" || status=$?
grep '^fuzz: ' "$log" | while read -r line; do ci_result "$line"; done
exit "$status"
