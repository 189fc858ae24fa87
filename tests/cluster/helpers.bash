# Helpers for the cluster tests (bats). The cluster is started by tests/cluster/run.sh.

: "${SLURM_CONF:?run through tests/cluster/run.sh}"
WORK=$STAGEHAND_CLUSTER_DIR/work
SCRATCH=$STAGEHAND_SCRATCH

# Runs a shell command as the test user in the work directory.
as_user() {
  runuser -u "$STAGEHAND_TEST_USER" -- env SLURM_CONF="$SLURM_CONF" PATH=/usr/bin:/bin bash -c "cd '$WORK' && $1"
}

# Writes a batch script (from stdin) into the work directory, readable by the test user.
script() {
  cat >"$WORK/$1"
  chmod 0755 "$WORK/$1"
}

# sbatch --wait as the user; sets JOB_ID, JOB_RC and LAST_OUTPUT. Extra args go to sbatch.
submit() {
  local out
  out=$(as_user "sbatch --parsable --wait -o out.%j $*" 2>&1) && JOB_RC=0 || JOB_RC=$?
  JOB_ID=$(echo "$out" | grep -Eo '^[0-9]+' | head -n1)
  SUBMIT_OUTPUT=$out
  if [ -n "$JOB_ID" ]; then
    wait_job_done "$JOB_ID"
    LAST_OUTPUT=$(cat "$WORK/out.$JOB_ID" 2>/dev/null || true)
  fi
}

# Waits until the job has left every node (epilogs done), at most 30 s.
wait_job_done() {
  local i
  for i in $(seq 1 60); do
    [ -z "$(squeue -h -j "$1" -t PD,R,CG,S -o %i 2>/dev/null)" ] && return 0
    sleep 0.5
  done
  echo "job $1 still present after 30 s" >&2
  return 1
}

# Fails when any node is drained, down or failing.
assert_nodes_healthy() {
  local bad
  bad=$(sinfo -h -N -o '%N %T' | grep -Ev ' (idle|allocated|mixed|completing)$' || true)
  if [ -n "$bad" ]; then
    echo "unhealthy nodes: $bad" >&2
    sinfo -N -o '%N %T %E' >&2
    return 1
  fi
}

job_dir() { echo "$SCRATCH/$1/job_$2"; }

# Rewrites the test config with extra [tmpdir] lines and extra tables (the plugin reads it at
# every step).
set_tmpdir_config() {
  cat >"$STAGEHAND_TEST_CONFIG" <<TOML
[tmpdir]
base = "$SCRATCH/%n"
keep_for = "1h"
$1
${2:-}
TOML
}

teardown() {
  if [ -z "${BATS_TEST_COMPLETED:-}" ]; then
    echo "---- submit output ----"; echo "${SUBMIT_OUTPUT:-}"
    echo "---- job output (job ${JOB_ID:-none}) ----"; echo "${LAST_OUTPUT:-}"
    echo "---- slurmd logs (stagehand lines) ----"
    grep -h stagehand "$STAGEHAND_CLUSTER_DIR"/log/slurmd-*.log | sort | tail -n 20 || true
  fi
  set_tmpdir_config ""
  assert_nodes_healthy
}
