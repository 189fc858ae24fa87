#!/usr/bin/env bash
# CI phase: configure and build stagehand from scratch with -Werror (through ccache when test.sh
# set it up: ci_use_ccache in lib.sh), and say how much of it the compiler cache served.
#   build.sh BUILD_DIR [CMAKE_ARGS...]     e.g. -DSLURM_ROOT=/var/cache/stagehand-ci/slurm-...
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=${1:?usage: build.sh BUILD_DIR [CMAKE_ARGS...]}
shift
rm -rf "$build"
ci_ccache_zero
cmake -S "$CI_ROOT" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTAGEHAND_WERROR=ON "$@"
cmake --build "$build" -j"$(nproc)"
ci_result "build $(basename "$build"): $(ci_ccache_stats)"
