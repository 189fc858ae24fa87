#!/usr/bin/env bash
# CI phase: configure and build stagehand from scratch with -Werror.
#   build.sh BUILD_DIR [CMAKE_ARGS...]     e.g. -DSLURM_ROOT=/var/cache/stagehand-ci/slurm-...
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=${1:?usage: build.sh BUILD_DIR [CMAKE_ARGS...]}
shift
rm -rf "$build"
cmake -S "$CI_ROOT" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTAGEHAND_WERROR=ON "$@"
cmake --build "$build" -j"$(nproc)"
