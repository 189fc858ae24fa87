# Helpers for the cluster tests (bats). The cluster is started by tests/cluster/run.sh.

: "${SLURM_CONF:?run through tests/cluster/run.sh}"
WORK=$STAGEHAND_CLUSTER_DIR/work
SCRATCH=$STAGEHAND_SCRATCH

# Runs a shell command as the test user in the work directory, with the cluster's Slurm clients
# first in PATH (STAGEHAND_SLURM_BIN, from cluster.sh env).
# SHELL is set as a login would: salloc's interactive step runs `srun ... --pty $SHELL`.
as_user() {
  runuser -u "$STAGEHAND_TEST_USER" -- env SLURM_CONF="$SLURM_CONF" SHELL=/bin/bash PATH="${STAGEHAND_SLURM_BIN:-/usr/bin}:/usr/bin:/bin" \
    bash -c "cd '$WORK' && $1"
}

# The shared-filesystem stand-in (tests/tools/sharedfs.py) and the cluster harness, for tests
# that mount a source or stop and start a daemon.
SHAREDFS=${STAGEHAND_SHAREDFS:-$STAGEHAND_SOURCE_DIR/tests/tools/sharedfs.py}
CLUSTER=$STAGEHAND_SOURCE_DIR/tests/cluster/cluster.sh
# kill_recorded PID TEXT: SIGKILL to PID only while its command line still holds TEXT. A pid
# written down earlier may name any process by now: pids wrap (at 32,768 on CI's machines, where
# the lanes and their thousands of children run side by side), and a recorded process that has
# ended leaves its number to the next one (once, a unit test of another lane was killed so).
kill_recorded() {
  local cmd
  cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$1/cmdline") || return 0
  [[ "$cmd" == *"$2"* ]] || return 0
  kill -9 "$1" 2>/dev/null || true
}

require_sharedfs() {
  [ -f "$SHAREDFS" ] || { echo "sharedfs.py not found at $SHAREDFS (set STAGEHAND_SHAREDFS)" >&2; return 1; }
}

# cached NODE NAME: waits (at most 60 s) until NODE's daemon lists an entry whose source ends in
# /NAME (its fill runs after the job's reply).
cached() {
  for _ in $(seq 1 300); do
    "$STAGEHAND_BUILD_DIR/helper/stagehand" cache ls --json --config "$STAGEHAND_TEST_CONFIG" --node "$1" 2>/dev/null |
      grep -q "/$2\"" && return 0
    sleep 0.2
  done
  echo "cached: $2 never reached the cache of $1" >&2
  return 1
}

# Writes a batch script (from stdin) into the work directory, readable by the test user.
script() {
  cat >"$WORK/$1"
  chmod 0755 "$WORK/$1"
}

# sbatch as the user, waiting for the job as `sbatch --wait` would, but without its back-off (it
# looks after 2 s, after 10 s and then every 32 s: a job of 3 s took 10 s, one of 11 s 42 s).
# PREFIX goes before sbatch in the user's shell (`ulimit -n 256;`, `SBATCH_EXPORT=NONE`); extra
# args go to sbatch. Sets JOB_ID, JOB_RC (sbatch's own status when it refuses, else the job's exit
# code as --wait gives it), SUBMIT_OUTPUT and, once the job has left every node, LAST_OUTPUT.
# A one-node job without a node list runs on node1 (-w node1), which the tests then look at: Slurm
# would otherwise take node2 whenever node1 is still busy with the job before (CI saw it).
sbatch_wait() {
  local prefix=$1 out pin="" a one=no listed=no
  shift
  for a in "$@"; do
    case $a in
    -N1 | --nodes=1) one=yes ;;
    -w* | --nodelist* | -N2 | --nodes=2) listed=yes ;;
    esac
  done
  [ "$one" = no ] || [ "$listed" = yes ] || pin="-w node1"
  out=$(as_user "$prefix sbatch --parsable -o out.%j $pin $*" 2>&1) && JOB_RC=0 || JOB_RC=$?
  JOB_ID=$(echo "$out" | grep -Eo '^[0-9]+' | head -n1)
  SUBMIT_OUTPUT=$out
  if [ -n "$JOB_ID" ]; then
    [ "$JOB_RC" -ne 0 ] || JOB_RC=$(job_exit_code "$JOB_ID")
    wait_job_done "$JOB_ID"
    LAST_OUTPUT=$(cat "$WORK/out.$JOB_ID" 2>/dev/null || true)
  fi
}

submit() { sbatch_wait "" "$@"; }

# job_exit_code ID: waits (at most 30 min) until every component of job ID has ended, and prints
# what `sbatch --wait` exits with: the highest exit status, 1 for a component a signal ended.
# COMPLETING and REQUEUED are not ends: a requeued job runs again.
job_exit_code() {
  local out rc end=$((SECONDS + 1800))
  while [ "$SECONDS" -lt "$end" ]; do
    if out=$(timeout 5 scontrol -o show job "$1" 2>&1); then
      rc=$(awk '
        { state = ""; code = ""
          for (i = 1; i <= NF; i++) {
            if ($i ~ /^JobState=/) state = substr($i, 10)
            if ($i ~ /^ExitCode=/) code = substr($i, 10)
          }
          if (state == "") next # not a job: a warning, or a line of a --wrap command (25.11 shows it)
          seen = 1
          if (state !~ /^(COMPLETED|CANCELLED|FAILED|TIMEOUT|NODE_FAIL|PREEMPTED|BOOT_FAIL|DEADLINE|OUT_OF_MEMORY)$/) busy = 1
          split(code, part, ":"); v = part[2] != 0 ? 1 : part[1] + 0; if (v > max) max = v }
        END { print (busy || !seen) ? "running" : max + 0 }' <<<"$out")
      [ "$rc" = running ] || { echo "$rc"; return 0; }
    elif [[ "$out" == *"Invalid job id"* ]]; then
      echo "job $1: purged before its end was seen" >&2
      echo 1
      return 0
    fi
    sleep 0.2
  done
  echo "job $1 did not end in 30 min" >&2
  echo 1
}

# Waits until the job has left every node (epilogs done), at most 30 s. A squeue that fails (a
# busy slurmctld) says nothing about the job: it is asked again, each ask bounded to 5 s so that a
# slurmctld that does not answer cannot stretch the wait past its deadline. A job slurmctld has
# already purged (MinJobAge) is done.
wait_job_done() {
  local out end=$((SECONDS + 30))
  while [ "$SECONDS" -lt "$end" ]; do
    if out=$(timeout 5 squeue -h -j "$1" -t PD,R,CG,S -o %i 2>&1); then
      grep -qE '^[0-9]+' <<<"$out" || return 0 # a warning squeue printed is not the job
    elif [[ "$out" == *"Invalid job id"* ]]; then
      return 0
    fi
    sleep 0.5
  done
  echo "job $1 still present after 30 s" >&2
  timeout 5 squeue -a -j "$1" -o '%i %u %T %M %N %r' >&2 || true
  return 1
}

# Fails when any node is drained, down or failing. ("planned": the backfill scheduler holds the
# node for a pending job, as after a heterogeneous job whose components waited for their nodes.)
assert_nodes_healthy() {
  local bad
  bad=$(sinfo -h -N -o '%N %T' | grep -Ev ' (idle|allocated|mixed|completing|planned)$' || true)
  if [ -n "$bad" ]; then
    echo "unhealthy nodes: $bad" >&2
    sinfo -N -o '%N %T %E' >&2
    return 1
  fi
}

# submit (waits for the job) of a --tmpdir job that fills its directory with 1,000 directories of 1,000
# empty files and prints "made"; fails unless it did. Extra args go to sbatch.
submit_million_files() {
  submit "$@" --tmpdir --wrap "'cd \$SLURM_TMPDIR && python3 -c \"
import os
for d in range(1000):
    os.mkdir(str(d))
    for f in range(1000):
        os.close(os.open(f\\\"{d}/{f}\\\", os.O_CREAT | os.O_WRONLY, 0o600))
\" && echo made'"
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -qx made
}

job_dir() { echo "$SCRATCH/$1/job_$2"; }

# Rewrites the test config with extra [tmpdir] lines and extra tables (the plugin reads it at
# every step). TMPDIR_BASE and KEEP_FOR replace the base and keep_for.
# Written aside and renamed over: an epilog reading it meanwhile sees the old file or the new one,
# never a half-written one (which would point it at another base and leave the job's directory).
set_tmpdir_config() {
  cat >"$STAGEHAND_TEST_CONFIG.new" <<TOML
[tmpdir]
base = "${TMPDIR_BASE:-$SCRATCH/%n}"
keep_for = "${KEEP_FOR:-1h}"
$1
${2:-}
$(cat "$STAGEHAND_DAEMON_TOML")
TOML
  chmod 0644 "$STAGEHAND_TEST_CONFIG.new"
  mv -f "$STAGEHAND_TEST_CONFIG.new" "$STAGEHAND_TEST_CONFIG"
}

# settle PATH...: waits until every entry under PATH last changed (mtime and ctime) more than 2 s
# ago. The daemon does not cache a source modified within 2 s of its staging (git's racy-index
# rule: it is staged "(no cache)"), so a test that expects "(cache miss)" settles its fresh sources.
settle() {
  local newest
  for _ in $(seq 1 100); do
    newest=$(find "$@" -printf '%C@\n%T@\n' | sort -n | tail -n1)
    awk -v n="$newest" -v t="$(date +%s.%N)" 'BEGIN { exit !(t - n > 2.1) }' && return 0
    sleep 0.1
  done
  echo "settle: $* still changing" >&2
  return 1
}

# Starts the stagehandd of any node whose daemon a test stopped or killed.
ensure_daemons() {
  local n pid
  for n in node1 node2; do
    pid=$(cat "$STAGEHAND_CLUSTER_DIR/stagehandd-$n.pid" 2>/dev/null || true)
    if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
      "$STAGEHAND_SOURCE_DIR/tests/cluster/cluster.sh" daemon-start "$n"
    fi
  done
}

# Starts the slurmd of any node a failed test left without one (a test that restarts slurmd and
# fails midway): the tests after it then fail for themselves, not because a node is gone.
ensure_slurmds() {
  local n pid
  for n in node1 node2; do
    pid=$(cat "$STAGEHAND_CLUSTER_DIR/slurmd-$n.pid" 2>/dev/null || true)
    if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
      echo "teardown: $n had no slurmd: started again" >&2
      "$STAGEHAND_SOURCE_DIR/tests/cluster/cluster.sh" node-start "$n"
    fi
  done
}

teardown() {
  # A test that held its shared filesystem (sharedfs.py --hold-opens/--hold-reads WORK/NAME.gate)
  # and failed before letting it go: what waits there goes on.
  rm -f "$WORK"/*.gate
  if [ -z "${BATS_TEST_COMPLETED:-}" ]; then
    echo "---- submit output ----"; echo "${SUBMIT_OUTPUT:-}"
    echo "---- job output (job ${JOB_ID:-none}) ----"; echo "${LAST_OUTPUT:-}"
    echo "---- slurmd logs (stagehand lines) ----"
    grep -h stagehand "$STAGEHAND_CLUSTER_DIR"/log/slurmd-*.log | sort | tail -n 20 || true
    # (the cluster's logs go when it stops: what a failure needs of the daemons' is kept here)
    echo "---- stagehandd logs (last lines) ----"
    tail -n 15 "$STAGEHAND_CLUSTER_DIR"/log/stagehandd-*.log 2>/dev/null || true
  fi
  set_tmpdir_config ""
  ensure_slurmds
  ensure_daemons
  assert_nodes_healthy
}
