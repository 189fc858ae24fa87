#!/usr/bin/env bash
# The test command (CI runs it through .ci/run), as root on Debian 12. Installs the packages, then
# runs the phases in scripts/ci/, and always ends with a summary: each phase's time and result
# (pass counts per Slurm release), and the total time.
#
#   scripts/test.sh            everything, what CI runs:
#     1. build against Debian's Slurm 22.05 (-Werror, through ccache)
#     2. the 22.05 cluster suite, in two halves on two test clusters, as lanes (below), while the
#        CPU goes on with: the 22.05 unit tests; Slurm 25.11.7 (built once per machine, cached by
#        sha256); the 25.11 build and unit tests; the 25.11 cluster suite (two more lanes); the
#        ASan+UBSan build and unit tests, then a subset of the cluster suite under them (a lane);
#        the fuzz targets (corpus replayed, 10 s each); Slurm 24.11.7 and 23.11.11 (each built
#        once per machine), a build against each and its unit tests, then a cluster smoke on a
#        cluster of that release (a lane each; scripts/ci/release.sh)
#     3. when every lane has ended: the packages (.deb checked, installed, used by a two-node job,
#        purged; the .deb again as an admin runs it, under Debian's systemd as PID 1 of a
#        throw-away overlay guest; the RPM)
#   scripts/test.sh --quick    for people: the build, the 22.05 unit tests and the 22.05 cluster
#                              suite (same lanes), nothing else
#
# Lanes: a cluster suite is mostly waiting on slurmctld and its jobs, not computing, so each runs
# in the background on a test cluster of its own (directory on a tmpfs, ports, test user: see
# ci_lane_cluster_env in scripts/ci/lib.sh) and its output is printed whole when it ends. The run
# stops at the first failed phase (the lanes still running are stopped and their clusters taken
# down); a failed lane fails the run when it is waited for. Ctrl-C (or TERM) stops the lanes, the
# clusters, their mounts and daemons before it exits: nothing is left for the next run.
# The compiling phases beside the lanes run at nice 10 (behind, below): the lanes' jobs come first.
#
# Variables: STAGEHAND_BUILD_DIR (default build-test; Slurm 25.11's is the same with -slurm25.11,
# the sanitizers' with -sanitize), STAGEHAND_CI_CACHE (default /var/cache/stagehand-ci: the Slurm
# builds and ccache's directory), STAGEHAND_CI_TMP (default /tmp/stagehand-ci: a tmpfs mounted for
# the run's test clusters), STAGEHAND_FUZZ_SECONDS, STAGEHAND_SLURM_SOURCES (scripts/ci/build-slurm.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ci=$root/scripts/ci
source "$ci/lib.sh"
trap - ERR # a failed phase is recorded by ci_phase

mode=full
case "${1:-}" in
  "") ;;
  --quick) mode=quick ;;
  -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  *) echo "test.sh: unknown option $1 (--quick, or nothing for the full run)" >&2; exit 2 ;;
esac
[ "$(id -u)" -eq 0 ] || { echo "test.sh: run as root (security tests drop to a user; the cluster runs slurmd)" >&2; exit 1; }
# One run per machine: the lanes' clusters have fixed directories, ports and users. (A pid file,
# not a flock: the daemons a run starts would inherit the lock's descriptor.)
run_pid_file=/run/stagehand-test.pid
other=$(cat "$run_pid_file" 2>/dev/null || true)
other_cmd=$( [ -z "$other" ] || tr '\0' ' ' <"/proc/$other/cmdline" 2>/dev/null || true)
if [ "$other" != $$ ] && [[ "$other_cmd" == *scripts/test.sh* ]]; then
  echo "test.sh: another scripts/test.sh (pid $other) is running on this machine; wait for it or stop it" >&2
  exit 1
fi
echo $$ >"$run_pid_file"

build=${STAGEHAND_BUILD_DIR:-$root/build-test}
build_current=$build-slurm25.11
export CI_START=$(date +%s)
export CI_TMP=${STAGEHAND_CI_TMP:-/tmp/stagehand-ci}
export STAGEHAND_CI_SUMMARY=$(mktemp "${TMPDIR:-/tmp}/stagehand-ci-summary.XXXXXX")
CI_LANE_DIR=$(mktemp -d "${TMPDIR:-/tmp}/stagehand-ci-lanes.XXXXXX")
export CI_LANE_DIR

# The run's test clusters live on a tmpfs of its own: their state, scratch bases, caches and work
# directories never wait on the disk (this kind of machine's is slow and noisy).
mount_tmp() {
  mkdir -p "$CI_TMP"
  if mountpoint -q "$CI_TMP"; then return 0; fi
  mount -t tmpfs -o size=16g,mode=0755 stagehand-ci "$CI_TMP" ||
    echo "test.sh: cannot mount a tmpfs at $CI_TMP: the test clusters use the disk" >&2
}

# take_down_clusters: every test cluster a run may have started, stopped (idempotent: a cluster
# that is not there is skipped); then what a stopped unit test left on the run's tmpfs (its
# temporary directories are there: STAGEHAND_TEST_TMP), e.g. the hung FUSE server of a test killed
# midway and its mount, and the tmpfs itself detached.
take_down_clusters() {
  local d
  for d in "$CI_TMP"/cluster-* /tmp/stagehand-cluster; do
    [ -f "$d/etc/slurm.conf" ] || continue
    STAGEHAND_CLUSTER_DIR=$d "$root/tests/cluster/cluster.sh" stop >/dev/null 2>&1 || true
  done
  STAGEHAND_CLUSTER_DIR=$CI_TMP "$root/tests/cluster/cluster.sh" sweep || true
  if mountpoint -q "$CI_TMP" 2>/dev/null; then umount -l "$CI_TMP" || true; fi
}

# What a run killed outright (SIGKILL: no trap ran) left: its lanes, in sessions of their own,
# still running, and their clusters.
lane_record=/run/stagehand-test.lanes
if [ -s "$lane_record" ]; then
  while read -r pid; do
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
    if [[ "$cmd" == *scripts/ci/lib.sh* ]]; then
      echo "test.sh: stopping lane $pid that a killed run left running" >&2
      kill -KILL -- "-$pid" 2>/dev/null || true
    fi
  done <"$lane_record"
  take_down_clusters
fi
: >"$lane_record"
export CI_LANE_RECORD=$lane_record

# On the way out, however it ends: the lanes still running stopped, the foreground phase's
# processes ended, every test cluster taken down, the tmpfs detached, then the summary.
finish() {
  local status=$1
  trap '' INT TERM HUP
  if [ -n "${CI_CURRENT_PHASE:-}" ]; then
    ci_summary_line "$(printf '%-7s %s' stopped "$CI_CURRENT_PHASE (the run was stopped, exit $status)")"
  fi
  ci_lanes_stop
  ci_kill_descendants $$
  take_down_clusters
  ci_summary
  printf 'total: %s (%s run)\n' "$(ci_mmss $(($(date +%s) - CI_START)))" "$mode"
  rm -rf "$STAGEHAND_CI_SUMMARY" "$CI_LANE_DIR"
  [ "$(cat "$run_pid_file" 2>/dev/null)" != $$ ] || rm -f "$run_pid_file" "$lane_record"
  exit "$status"
}
trap 'finish $?' EXIT
trap 'echo "test.sh: interrupted: stopping the lanes and test clusters" >&2; exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# The cluster suite in two halves of about equal time (seconds per file as measured on a 2-core
# machine, tests and setup, on a tmpfs; a file not listed counts 120 s), so that each Slurm release's suite
# takes half the time on two clusters side by side.
declare -A FILE_SECONDS=(
  [broadcast.bats]=60 [daemon.bats]=110 [ddp.bats]=50 [ddp_steps.bats]=35 [export_none.bats]=5
  [fault.bats]=35 [progress.bats]=80 [root_paths.bats]=65 [stage.bats]=30 [stage_engine.bats]=25
  [stage_grammar.bats]=12 [stage_out.bats]=150 [tmpdir.bats]=28 [prolog_scripts.bats]=65 [daemon_load.bats]=70
  [stuck_child.bats]=45 [tmpdir_mounts.bats]=20 [views.bats]=60 [namespace_tmpfs.bats]=25
)
# suite_half 1|2 RELEASE: the files of that half for that release (tests/cluster/files_for.sh:
# a file may require a later Slurm), greedily by time.
suite_half() {
  local want=$1 release=$2 f t a=0 b=0 sorted
  sorted=$("$root/tests/cluster/files_for.sh" "$release" 2>/dev/null | while read -r f; do
    echo "${FILE_SECONDS[$f]:-120} $f"
  done | sort -rn)
  while read -r t f; do
    if [ "$a" -le "$b" ]; then
      a=$((a + t))
      [ "$want" != 1 ] || echo "$f"
    else
      b=$((b + t))
      [ "$want" != 2 ] || echo "$f"
    fi
  done <<<"$sorted"
}
mapfile -t half1 < <(suite_half 1 22.05)
mapfile -t half2 < <(suite_half 2 22.05)
mapfile -t half1_current < <(suite_half 1 25.11)
mapfile -t half2_current < <(suite_half 2 25.11)

# phase NAME COMMAND...: a foreground phase, after checking that no lane has failed meanwhile.
phase() {
  ci_lanes_check
  ci_phase "$@"
}

# behind NAME COMMAND...: a phase of compiling (and tests with no clock in them) while the lanes
# run, at nice 10: a cluster lane mostly waits on its jobs, but when they want a core they get it
# before the compiler does. (At the same priority, Slurm builds and sanitizer compiles beside four
# lanes on two cores slowed the clusters' jobs past what their tests waited for.) The unit phases
# of 22.05 and 25.11 keep nice 0: their daemon load tests time the daemon's answers (daemon_limits
# in both, daemon_latency in 22.05's).
behind() {
  local name=$1
  shift
  phase "$name" nice -n 10 "$@"
}

ci_phase "install packages" "$root/scripts/install-deps.sh"
mount_tmp
ci_use_ccache
# The unit tests' temporary directories on the run's tmpfs too, where the way out finds what a
# stopped test left (tests/unit/test_support.cpp; /dev/shm otherwise).
export STAGEHAND_TEST_TMP=$CI_TMP/unit
mkdir -p "$STAGEHAND_TEST_TMP"

phase "build (Debian's Slurm 22.05)" "$ci/build.sh" "$build"
"$root/tests/cluster/files_for.sh" 22.05 2>&1 >/dev/null | while read -r line; do ci_summary_line "  $line"; done
ci_lane "cluster tests (Slurm 22.05), half 1" 0 "$ci/cluster.sh" "$build" "${half1[@]}"
ci_lane "cluster tests (Slurm 22.05), half 2" 1 "$ci/cluster.sh" "$build" "${half2[@]}"
phase "unit tests (Slurm 22.05)" "$ci/unit.sh" "$build"

if [ "$mode" = full ]; then
  slurm_prefix_file=$(mktemp)
  behind "Slurm 25.11.7 (cached by sha256)" bash -c '"$1" >"$2"' _ "$ci/build-slurm.sh" "$slurm_prefix_file"
  slurm_prefix=$(cat "$slurm_prefix_file")
  rm -f "$slurm_prefix_file"
  behind "build (Slurm 25.11)" "$ci/build.sh" "$build_current" -DSLURM_ROOT="$slurm_prefix"
  ci_lane "cluster tests (Slurm 25.11), half 1" 2 "$ci/cluster.sh" "$build_current" "${half1_current[@]}"
  ci_lane "cluster tests (Slurm 25.11), half 2" 3 "$ci/cluster.sh" "$build_current" "${half2_current[@]}"
  # daemon_latency times the daemon (no Slurm code in it) for minutes: once, with 22.05, is enough.
  phase "unit tests (Slurm 25.11)" "$ci/unit.sh" "$build_current" '^daemon_latency$' \
    "the daemon's status latency under load, no Slurm code: run with Slurm 22.05"
  behind "sanitizers: build, unit tests (ASan+UBSan)" "$ci/sanitize.sh" "$build" unit
  ci_lane "sanitizers: cluster subset (ASan+UBSan)" 4 "$ci/sanitize.sh" "$build" cluster
  behind "fuzzing (corpus replayed, then ${STAGEHAND_FUZZ_SECONDS:-10} s a target)" "$ci/fuzz.sh" "$build"
  # The other releases of the README's support table: a build, its unit tests, the cluster smoke.
  lane=5
  for version in 24.11.7 23.11.11; do
    behind "Slurm $version: build, unit tests" "$ci/release.sh" "$version" "$build-slurm$version" build
    ci_lane "cluster smoke (Slurm $version)" "$lane" "$ci/release.sh" "$version" "$build-slurm$version" smoke
    lane=$((lane + 1))
  done
fi

ci_log "waiting for the lanes"
ci_lanes_wait || {
  echo "test.sh: failed lanes: ${CI_LANE_FAILED[*]}" >&2
  exit 1
}

if [ "$mode" = full ]; then
  phase "package: .deb" "$ci/package-deb.sh" "$build"
  phase "package: install, job, purge" "$ci/package-install.sh" "$build"
  phase "package: under systemd (its units, an ordinary user's jobs, reload, restart, purge)" "$ci/package-systemd.sh" "$build"
  phase "package: RPM" "$ci/package-rpm.sh" "$build"
fi
