#!/usr/bin/env bash
# CI phase: stagehand once more under AddressSanitizer + UndefinedBehaviorSanitizer (halt on the
# first report, leak detection on; libslurm's own leaks suppressed by tests/sanitize/lsan.supp,
# nothing of ours). Zero reports allowed.
#   sanitize.sh BUILD_DIR unit|cluster|all   (BUILD_DIR: the ordinary build; the sanitizer build
#                            is BUILD_DIR-sanitize, or SANITIZE_BUILD_DIR; default all)
#
# test.sh runs "unit" (build and unit tests) in its CPU line and then "cluster" as a lane of its
# own, on a cluster of its own, while the rest goes on.
#
# 1. every unit test (the core, the plugin's parsers, the root code paths, the extractor);
# 2. a representative subset of the cluster suite (SANITIZE_CLUSTER_FILES) with the sanitized
#    stagehand CLI (the stage-run helper every --stage-data job runs, gc, status, cache) and the
#    sanitized stagehandd (see below). The plugin itself stays the ordinary build's: it is loaded into
#    Slurm's own uninstrumented processes (sbatch, srun, slurmd, slurmstepd), where an ASan-built
#    library cannot load without preloading the runtime into Slurm and every job's tasks; its code
#    is sanitized through the unit tests. The subset is the files that drive the helper and the
#    daemon (staging, the cache, scratch directories, root paths); the DDP and --export files
#    run plugin code only and are left to the ordinary cluster phases, which keeps this phase to
#    a few minutes of cluster time.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=${1:?usage: sanitize.sh BUILD_DIR [unit|cluster|all]}
mode=${2:-all}
case "$mode" in unit | cluster | all) ;; *) ci_die "unknown mode $mode (unit, cluster or all)" ;; esac
san=${SANITIZE_BUILD_DIR:-$build-sanitize}
files=${SANITIZE_CLUSTER_FILES:-stage.bats stage_engine.bats stage_grammar.bats daemon.bats tmpdir.bats root_paths.bats}

# allocator_may_return_null: an allocation past a limit (a user child's RLIMIT_DATA) fails as it
# does without ASan (std::bad_alloc, handled and reported) instead of ending the process.
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=0:detect_leaks=1:check_initialization_order=1:strict_init_order=1:allocator_may_return_null=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export LSAN_OPTIONS=suppressions=$CI_ROOT/tests/sanitize/lsan.supp:print_suppressions=0

log=$(mktemp)
trap 'rm -f "$log"' EXIT
if [ "$mode" != cluster ]; then
  slurm_root=$(sed -n 's/^SLURM_ROOT:PATH=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
  # clang 19: its ASan takes its allocator's locks around fork() (LLVM 18 and later; GCC 12's and
  # clang 14's do not), so a child forked from the daemon's threads never waits on a lock another
  # thread held, and stagehandd runs sanitized too.
  command -v clang++-19 >/dev/null || ci_die "clang++-19 is missing (scripts/install-deps.sh installs clang-19 libclang-rt-19-dev)"
  CC=clang-19 CXX=clang++-19 cmake -S "$CI_ROOT" -B "$san" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTAGEHAND_SANITIZE=address,undefined \
    -DSTAGEHAND_BUILD_EXAMPLES=OFF -DSTAGEHAND_BUILD_MAN=OFF ${slurm_root:+-DSLURM_ROOT="$slurm_root"} >/dev/null
  # Only what runs here: the unit tests (ctest also runs the CLI's and the replay tool's bats files),
  # the CLI and the daemon; the plugin in the cluster run is the ordinary build's (below).
  cmake --build "$san" -j"$(nproc)" --target stagehand_unit_tests stagehand stagehandd stagehand-ddp-replay

  status=0
  (cd "$san" && ctest --output-on-failure -j"$(nproc)") 2>&1 | tee "$log" || status=$?
  [ "$status" -eq 0 ] || { ci_failed_tests "$log"; ci_die "unit tests failed under the sanitizers"; }
  if grep -qE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$log"; then
    ci_die "sanitizer reports in the unit tests (above)"
  fi
  unit=$(grep -E 'tests passed, [0-9]+ tests failed out of [0-9]+' "$log" | tail -n1 | sed -E 's/.*out of ([0-9]+).*/\1/')
  ci_result "sanitize: unit ${unit:-?} passed, no sanitizer report (daemon_latency: ordinary builds only)"
fi
[ "$mode" != unit ] || exit 0
[ -x "$san/helper/stagehand" ] || ci_die "no sanitizer build in $san (run the unit mode first)"

# The cluster tree: the ordinary plugin, the sanitized CLI and daemon (cluster.sh installs the
# helper and daemon found beside the plugin's directory).
tree=$san/cluster-tree
rm -rf "$tree" && mkdir -p "$tree/plugin" "$tree/helper"
cp "$san/CMakeCache.txt" "$tree/"
cp "$build/plugin/stagehand.so" "$tree/plugin/"
# stagehandd sanitized as well: it forks its user-side children (ipc/child.cpp) from a
# multithreaded process and they allocate before any exec; clang 19's ASan locks its allocator
# around fork, so no child waits on a lock another thread held (GCC 12's did not: a staging job
# hung in fdopendir that way).
cp "$san/helper/stagehand" "$tree/helper/"
cp "$san/helper/stagehandd" "$tree/helper/"
# The LibTorch example (stage.bats trains it on staged data) as the ordinary build made it.
[ ! -d "$build/examples" ] || ln -s "$build/examples" "$tree/examples"
# Reports of the processes started from here (stagehandd, the CLI run by the tests) land in
# $reports (the cluster's logs go when it stops); the stage-run helper's go to the job's output.
reports_dir=$san/reports
rm -rf "$reports_dir" && mkdir -m 1777 "$reports_dir"
export ASAN_OPTIONS=$ASAN_OPTIONS:log_path=$reports_dir/asan
export UBSAN_OPTIONS=$UBSAN_OPTIONS:log_path=$reports_dir/ubsan
paths=()
for f in $files; do paths+=("$CI_ROOT/tests/cluster/$f"); done
status=0
"$CI_ROOT/tests/cluster/run.sh" "$tree" "${paths[@]}" 2>&1 | tee "$log" || status=$?
cluster_dir=${STAGEHAND_CLUSTER_DIR:-/tmp/stagehand-cluster}
reports=$( (ls "$reports_dir"; grep -rlE 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$cluster_dir/work" 2>/dev/null || true) | wc -l)
counts=$(grep -E '^cluster \(Slurm ' "$log" | tail -n1 || true)
ci_result "sanitize: ${counts:-cluster: no result line} ($files); $reports files with sanitizer reports"
[ "$status" -eq 0 ] || ci_failed_tests "$log"
[ "$reports" -eq 0 ] || { head -n 60 "$reports_dir"/* 2>/dev/null; grep -rE -A20 'ERROR: (Address|Leak)Sanitizer|runtime error:' "$cluster_dir/work" | head -n 60; ci_die "sanitizer reports in the cluster run"; }
exit "$status"
