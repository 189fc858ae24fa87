# Shared by scripts/test.sh and the phases in scripts/ci/: logging, timing, the summary, and the
# lanes (phases that run in the background beside the others, each with a test cluster of its
# own). Each phase records its one-line result with `ci_result`; test.sh prints them all at the end.

CI_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

ci_log() { echo "== $*"; }

# mmss SECONDS
ci_mmss() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# ci_summary_line TEXT: one line into the final summary (STAGEHAND_CI_SUMMARY, a file test.sh sets;
# a lane has a file of its own, added to the summary when the lane is waited for).
ci_summary_line() {
  if [ -n "${STAGEHAND_CI_SUMMARY:-}" ]; then echo "$*" >>"$STAGEHAND_CI_SUMMARY"; fi
}

# A phase's failure reaches the summary with its reason, since the summary may be all of a CI
# log that someone gets to read: ci_die's message, or the top-level command of the phase script
# that failed under set -e (the ERR trap, which functions do not inherit; test.sh, which records
# the failed phase itself, turns it off).
ci_die() {
  echo "ci: error: $*" >&2
  ci_summary_line "  $(basename "$0"): $*"
  exit 1
}
ci_on_error() {
  local status=$1 line=$2 command=$3
  ci_summary_line "  $(basename "$0") line $line: exit $status from: $command"
}
trap 'ci_on_error $? $LINENO "$BASH_COMMAND"' ERR

# ci_failed_tests LOG: the failed tests' lines in a bats (TAP) or ctest log, ten at most,
# into the summary.
ci_failed_tests() {
  grep -E '^not ok |^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*' "$1" 2>/dev/null |
    sed 's/^ */  failed: /' | head -n 10 | while IFS= read -r l; do ci_summary_line "$l"; done || true
}

# ci_result TEXT: a phase's result, printed and into the summary.
ci_result() {
  echo "result: $*" >&2
  ci_summary_line "  $*"
}

# ci_phase NAME COMMAND...: runs one phase, prints its duration, puts its time (and when it ran,
# from the start of the run: CI_START, epoch seconds) into the summary, records a failure.
# The phase's own summary lines (its results, the reason it failed) follow its time line.
ci_phase() {
  local name=$1 start=$SECONDS status=0 from summary=${STAGEHAND_CI_SUMMARY:-} mine
  shift
  from=$(($(date +%s) - ${CI_START:-$(date +%s)}))
  mine=$(mktemp "${TMPDIR:-/tmp}/stagehand-ci-phase.XXXXXX")
  echo
  ci_log "phase: $name"
  # In the background and waited for, so that a signal to test.sh is handled at once, not after
  # the phase (bash runs a trap only once the foreground command is done); test.sh's exit then
  # ends the phase's processes (ci_kill_descendants).
  CI_CURRENT_PHASE=$name
  STAGEHAND_CI_SUMMARY=$mine "$@" &
  wait $! || status=$?
  CI_CURRENT_PHASE=
  local took=$((SECONDS - start)) word=ok
  [ $status -eq 0 ] || word="FAILED (exit $status)"
  printf '== phase %s: %s in %s\n' "$name" "$word" "$(ci_mmss $took)"
  STAGEHAND_CI_SUMMARY=$summary
  ci_summary_line "$(printf '%-7s %-50s %7s  (from +%s)' "$([ $status -eq 0 ] && echo ok || echo FAILED)" "$name" "$(ci_mmss $took)" "$(ci_mmss "$from")")"
  if [ -n "$summary" ]; then cat "$mine" >>"$summary"; fi
  rm -f "$mine"
  if [ $status -ne 0 ]; then
    ci_summary_line "  FAILED: $name (exit $status)"
    return $status
  fi
}

ci_summary() {
  echo
  echo "================ summary ================"
  cat "$STAGEHAND_CI_SUMMARY" 2>/dev/null || true
  echo "========================================="
}

# ---- lanes ----------------------------------------------------------------------------------
# A lane is one phase run in the background, in a session of its own (so that a Ctrl-C at the
# terminal reaches test.sh, which stops the lanes in order), with its output in a log of its own
# that test.sh prints whole when the lane ends (lanes never interleave in the CI log). The cluster
# suites are mostly waiting on slurmctld and their jobs, so they run as lanes while the builds use
# the CPU: each on a test cluster of its own (directory, ports, test user; ci_lane_cluster_env).
# CI_LANE_DIR: where the lanes' logs and summaries live (test.sh makes it).
CI_LANE_PIDS=()
CI_LANE_NAMES=()
CI_LANE_FAILED=()

# ci_lane_cluster_env INDEX: the cluster a lane's tests use: a directory on the run's tmpfs
# (CI_TMP), ports 46817 + 100 * INDEX (cluster.sh keeps to its block of 100) and a test user of
# its own (cluster.sh kills the test user's processes when it stops).
ci_lane_cluster_env() {
  local i=$1
  echo "STAGEHAND_CLUSTER_DIR=${CI_TMP:?}/cluster-$i"
  echo "STAGEHAND_CLUSTER_PORT=$((46817 + 100 * i))"
  if [ "$i" -eq 0 ]; then echo "STAGEHAND_TEST_USER=stagehand-test"; else echo "STAGEHAND_TEST_USER=stagehand-test$i"; fi
}

# ci_lane NAME CLUSTER_INDEX COMMAND...: starts COMMAND as the phase NAME in the background with
# the cluster of CLUSTER_INDEX ("-" for none) in its environment.
ci_lane() {
  local name=$1 index=$2 n=${#CI_LANE_PIDS[@]}
  shift 2
  local log=$CI_LANE_DIR/lane-$n.log
  local -a env_args=("STAGEHAND_CI_SUMMARY=$CI_LANE_DIR/lane-$n.summary")
  if [ "$index" != - ]; then
    mapfile -t -O 1 env_args < <(ci_lane_cluster_env "$index")
  fi
  : >"$CI_LANE_DIR/lane-$n.summary"
  ci_log "lane started: $name (output when it ends: $log)"
  rm -f "$CI_LANE_DIR/lane-$n.rc"
  setsid env "${env_args[@]}" bash -c 'source "$1/scripts/ci/lib.sh"; trap - ERR; rc=$2; shift 2
    status=0; ci_phase "$@" || status=$?; echo "$status" >"$rc.new"; mv "$rc.new" "$rc"; exit "$status"' \
    _ "$CI_ROOT" "$CI_LANE_DIR/lane-$n.rc" "$name" "$@" </dev/null >"$log" 2>&1 &
  CI_LANE_PIDS+=($!)
  CI_LANE_NAMES+=("$name")
  # For a later run, should this one be killed outright (then nothing here stops the lanes).
  [ -z "${CI_LANE_RECORD:-}" ] || echo "$!" >>"$CI_LANE_RECORD"
}

# ci_lane_collect I: waits for lane I (ended, or about to), prints its output, adds its summary;
# returns its exit status. The status is the one the lane wrote to its rc file: bash's `wait` once
# answered "pid N is not a child of this shell" (127) for a lane whose tests had all passed, most
# likely its pid reused meanwhile (pid_max is 32768 on small VMs and a CI run forks hundreds of
# thousands of processes). `wait`'s own status counts only for a lane that ended without writing
# its rc file (killed).
ci_lane_collect() {
  local i=$1 status=0 rc_file=$CI_LANE_DIR/lane-$1.rc
  # No wait once the rc file is there: its pid may belong to another child by now.
  [ -e "$rc_file" ] || wait "${CI_LANE_PIDS[$i]}" 2>/dev/null || status=$?
  if [ -s "$rc_file" ]; then
    status=$(cat "$rc_file")
  elif [ "$status" -eq 0 ]; then
    status=1
  fi
  CI_LANE_PIDS[$i]=
  echo
  ci_log "lane output: ${CI_LANE_NAMES[$i]} (exit $status)"
  cat "$CI_LANE_DIR/lane-$i.log"
  cat "$CI_LANE_DIR/lane-$i.summary" >>"$STAGEHAND_CI_SUMMARY"
  [ "$status" -eq 0 ] || CI_LANE_FAILED+=("${CI_LANE_NAMES[$i]}")
  return "$status"
}

# ci_lanes_check: fails (after printing the lane's output) when a lane has already failed, so that
# the run stops at its first failure rather than when the lanes are waited for.
ci_lanes_check() {
  local i
  for i in "${!CI_LANE_PIDS[@]}"; do
    [ -n "${CI_LANE_PIDS[$i]}" ] && [ -f "$CI_LANE_DIR/lane-$i.rc" ] || continue
    [ "$(cat "$CI_LANE_DIR/lane-$i.rc")" != 0 ] || continue
    ci_lane_collect "$i" || true
    echo "ci: lane failed: ${CI_LANE_NAMES[$i]}" >&2
    return 1
  done
}

# ci_lanes_wait: waits for every lane started so far, printing each one's output and adding its
# summary lines as it ends. Returns non-zero when any failed.
ci_lanes_wait() {
  local i any=0
  for i in "${!CI_LANE_PIDS[@]}"; do
    [ -n "${CI_LANE_PIDS[$i]}" ] || continue
    ci_lane_collect "$i" || any=1
  done
  return $any
}

# ci_lanes_stop: ends the lanes still running: TERM to each lane's process group (its cluster run
# stops its cluster on the way out), up to 60 s for the group to empty, then KILL. A lane that had
# already ended is collected as ci_lanes_wait would; one that was stopped says so in the summary.
ci_lanes_stop() {
  local i pid
  for i in "${!CI_LANE_PIDS[@]}"; do
    pid=${CI_LANE_PIDS[$i]}
    [ -n "$pid" ] || continue
    if [ -f "$CI_LANE_DIR/lane-$i.rc" ]; then
      ci_lane_collect "$i" || true
      continue
    fi
    ci_log "stopping lane: ${CI_LANE_NAMES[$i]}"
    kill -TERM -- "-$pid" 2>/dev/null || true
  done
  for i in "${!CI_LANE_PIDS[@]}"; do
    pid=${CI_LANE_PIDS[$i]}
    [ -n "$pid" ] || continue
    for _ in $(seq 1 600); do kill -0 -- "-$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    CI_LANE_PIDS[$i]=
    ci_summary_line "$(printf '%-7s %s' stopped "${CI_LANE_NAMES[$i]}")"
    ci_log "lane stopped: ${CI_LANE_NAMES[$i]}; its last lines:"
    tail -n 15 "$CI_LANE_DIR/lane-$i.log" 2>/dev/null || true
  done
}

# ci_kill_descendants PID: TERM to every process below PID (deepest first), then KILL to what is
# left after 5 s. test.sh's way out: what a foreground phase was running when the run stopped.
ci_kill_descendants() {
  local all=() queue=("$1") p c
  while [ ${#queue[@]} -gt 0 ]; do
    p=${queue[0]}
    queue=("${queue[@]:1}")
    for c in $(pgrep -P "$p" || true); do
      all=("$c" "${all[@]}")
      queue+=("$c")
    done
  done
  [ ${#all[@]} -gt 0 ] || return 0
  kill -TERM "${all[@]}" 2>/dev/null || true
  local alive
  for _ in $(seq 1 50); do
    alive=0
    for p in "${all[@]}"; do ! kill -0 "$p" 2>/dev/null || alive=1; done
    [ "$alive" -eq 1 ] || return 0
    sleep 0.1
  done
  kill -KILL "${all[@]}" 2>/dev/null || true
}

# ---- the compiler cache ---------------------------------------------------------------------
# ci_use_ccache: every cmake configure from here on compiles through ccache (CMake reads
# CMAKE_<LANG>_COMPILER_LAUNCHER from the environment), with its directory in the CI cache
# (STAGEHAND_CI_CACHE/ccache), paths taken relative to the source tree and the build directory
# left out of the hash: a fresh clone in another folder, and the Slurm 25.11 build after the 22.05
# one, find the objects that do not depend on Slurm already compiled.
ci_use_ccache() {
  command -v ccache >/dev/null || { echo "ci: no ccache: compiling everything" >&2; return 0; }
  export CCACHE_DIR=${STAGEHAND_CI_CACHE:-/var/cache/stagehand-ci}/ccache
  export CCACHE_BASEDIR=$CI_ROOT CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-4G}
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
  mkdir -p "$CCACHE_DIR"
}
ci_ccache_zero() { [ -z "${CCACHE_DIR:-}" ] || ccache --zero-stats >/dev/null 2>&1 || true; }
# ci_ccache_stats: "ccache: H of N compilations served from the cache" since ci_ccache_zero
# (builds run one at a time: the lanes run tests, not compilers).
ci_ccache_stats() {
  [ -n "${CCACHE_DIR:-}" ] || { echo "no compiler cache"; return 0; }
  ccache --print-stats 2>/dev/null | awk -F'\t' '
    $1 == "direct_cache_hit" || $1 == "preprocessed_cache_hit" { hit += $2 }
    $1 == "cache_miss" { miss += $2 }
    END { printf "ccache: %d of %d compilations served from the cache\n", hit, hit + miss }'
}

# ci_smoke_tests files|filter: the cluster smoke a release beside the two fully tested ones gets
# (release.sh, scripts/slurm-matrix.sh): --tmpdir on two nodes, --stage-data through the daemon
# (a miss, then a hit), --ddp-env with PyTorch's all_reduce (a plain step, a heterogeneous one
# made by srun), --stage-out. The files, one a line, or the regex of the test names (bats
# --filter); each name must match exactly one test (release.sh checks the count bats plans).
CI_SMOKE=(
  "tmpdir.bats|2-node job: each node has its own directory, owned by the user, mode 0700"
  "daemon.bats|a second job on the node is a cache hit with identical content"
  "ddp.bats|srun -N2 -n4 --ddp-env: PyTorch gloo all_reduce with init_method=env://"
  "ddp_steps.bats|heterogeneous step that srun makes itself"
  "stage_out.bats|a job that ends normally leaves out/ in DEST"
)
ci_smoke_tests() {
  local entry
  case "$1" in
    files) for entry in "${CI_SMOKE[@]}"; do echo "${entry%%|*}"; done ;;
    filter)
      local names=()
      for entry in "${CI_SMOKE[@]}"; do names+=("$(printf '%s' "${entry#*|}" | sed 's/[][\.*^$()+?{}|]/\\&/g')"); done
      (IFS='|'; echo "^(${names[*]})")
      ;;
  esac
}
