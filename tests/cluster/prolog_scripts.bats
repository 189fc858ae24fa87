#!/usr/bin/env bats
# `stagehand prolog` / `stagehand epilog` as slurm.conf Prolog=/Epilog= scripts, beside the plugin
# (its options need stagehand.so in plugstack.conf, so slurmd runs the plugin's job prolog/epilog
# too: first, then the script, one after the other). What users and admins rely on: the job's
# directory made once and usable, removed once, --stage-out delivered exactly once, --tmpdir=keep
# kept, no node drained.
#
# The file runs the cluster with the scripts (cluster.sh, STAGEHAND_CLUSTER_PROLOG=1), restarting
# it when run.sh started it without them, and restarts it as it was afterwards.

load helpers

bats_require_minimum_version 1.5.0

LOG=.stagehand-stage-out.log
SCRIPTS_LOG=$STAGEHAND_CLUSTER_DIR/log/job-scripts.log

restart_cluster() {
  local out=$BATS_FILE_TMPDIR/cluster-restart.log
  if ! STAGEHAND_CLUSTER_PROLOG=$1 "$STAGEHAND_SOURCE_DIR/tests/cluster/cluster.sh" start \
    "$STAGEHAND_BUILD_DIR/plugin/stagehand.so" </dev/null >"$out" 2>&1 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&-; then
    cat "$out" >&2
    rm -f "$out"
    return 1
  fi
  rm -f "$out"
}

setup_file() {
  if grep -q '^Prolog=' "$SLURM_CONF"; then
    export PROLOG_SCRIPTS_RESTARTED=0
  else
    restart_cluster 1
    export PROLOG_SCRIPTS_RESTARTED=1
  fi
  grep -qx "Prolog=$STAGEHAND_CLUSTER_DIR/lib/prolog.sh" "$SLURM_CONF"
  grep -qx "Epilog=$STAGEHAND_CLUSTER_DIR/lib/epilog.sh" "$SLURM_CONF"
}

teardown_file() {
  if [ "${PROLOG_SCRIPTS_RESTARTED:-0}" = 1 ]; then
    restart_cluster 0
  fi
}

setup() {
  rm -rf "$WORK/so" && mkdir -p "$WORK/so" && chown "$STAGEHAND_TEST_USER:" "$WORK/so"
}

# The lines the scripts (and the CLI they run) wrote for job $1.
script_lines() { grep -E "job[= ]$1([^0-9]|$)" "$SCRIPTS_LOG" || true; }
# The plugin's own lines in node $2's slurmd log for job $1 matching $3.
plugin_lines() { grep -c "stagehand: $3: job $1: " "$STAGEHAND_CLUSTER_DIR/log/slurmd-$2.log" || true; }

# Both nodes idle (not drained, not down) once the job is gone.
assert_nodes_idle() {
  [ "$(sinfo -h -N -o '%N %T' | sort | tr '\n' ' ')" = "node1 idle node2 idle " ]
}

# Waits (at most 60 s) until DEST's log $2 has a line of job $1 and, unless $3 is "kept", no
# directory of the job is left on node1 (with the daemon the copy finishes after the job), then
# 3 s more for a second copy to show.
wait_copied() {
  local i
  for i in $(seq 1 120); do grep -qs "job $1 node" "$2" && break; sleep 0.5; done
  if [ "${3:-}" != kept ]; then
    for i in $(seq 1 100); do ls -a "$SCRATCH/node1" | grep -q "job_$1\(\.\|$\)" || break; sleep 0.2; done
  fi
  sleep 3
}

@test "the scripts run on every node of the job with its id, uid and node name, and exit 0" {
  submit -N2 --tmpdir --wrap "'srun -N2 -n2 true'"
  [ "$JOB_RC" -eq 0 ]
  uid=$(id -u "$STAGEHAND_TEST_USER")
  lines=$(script_lines "$JOB_ID")
  echo "$lines"
  for hook in prolog epilog; do
    for n in node1 node2; do
      [ "$(grep -c " $hook script: job=$JOB_ID node=$n uid=$uid " <<<"$lines")" -eq 1 ]
    done
  done
  # The CLI found what it needs in slurmd's environment (no usage error, no failure).
  [ "$(grep -c "stagehand: \(error\|warning\)" <<<"$lines")" -eq 0 ]
  assert_nodes_idle
}

@test "a --stage-data job's scripts are told it stages (the daemon hears so from a script that makes the directory)" {
  echo data >"$WORK/so/in.txt"
  chown "$STAGEHAND_TEST_USER:" "$WORK/so/in.txt"
  submit -N2 --stage-data="$WORK/so/in.txt" --wrap "'srun -N2 -n2 true'"
  [ "$JOB_RC" -eq 0 ]
  lines=$(script_lines "$JOB_ID")
  echo "$lines"
  for n in node1 node2; do
    [ "$(grep -c " prolog script: job=$JOB_ID node=$n .* stage_data=1 " <<<"$lines")" -eq 1 ]
  done
  # A job without --stage-data: not told so.
  submit --tmpdir --wrap true
  [ "$JOB_RC" -eq 0 ]
  script_lines "$JOB_ID"
  [ "$(script_lines "$JOB_ID" | grep -c " prolog script: job=$JOB_ID .* stage_data=unset ")" -eq 1 ]
  assert_nodes_idle
  # The plugin's cache-view records (root's .views, made at the --stage-data job's task start):
  # gone again, as the tests after this one find the node's base empty.
  rm -rf "$SCRATCH/node1/.views" "$SCRATCH/node2/.views"
}

@test "a 2-node --tmpdir job: the plugin's directory is made once, usable by the job, removed once" {
  script usable.sh <<'EOF2'
#!/bin/bash
srun -N2 -n2 -l bash -c 'echo "task $SLURMD_NODENAME $SLURM_TMPDIR $(stat -c "%U %a %i" "$SLURM_TMPDIR")"; echo ok >"$SLURM_TMPDIR/f" && cat "$SLURM_TMPDIR/f"'
EOF2
  submit -N2 --tmpdir usable.sh
  [ "$JOB_RC" -eq 0 ]
  d1=$(job_dir node1 "$JOB_ID")
  d2=$(job_dir node2 "$JOB_ID")
  echo "$LAST_OUTPUT" | grep -q "^0: task node1 $d1 $STAGEHAND_TEST_USER 700 "
  echo "$LAST_OUTPUT" | grep -q "^1: task node2 $d2 $STAGEHAND_TEST_USER 700 "
  [ "$(echo "$LAST_OUTPUT" | grep -c '^[01]: ok$')" -eq 2 ]
  lines=$(script_lines "$JOB_ID")
  echo "$lines"
  for n in node1 node2; do
    # Made by the plugin's prolog once; the prolog script leaves it (never a second directory
    # that sends the first to the trash as "stale").
    [ "$(plugin_lines "$JOB_ID" "$n" prolog)" -eq 1 ]
    [ "$(grep -c "prolog: job $JOB_ID: created" <<<"$lines")" -eq 0 ]
    [ "$(grep -c "stale" <<<"$lines")" -eq 0 ]
    # Removed once, by the plugin's epilog; the epilog script finds nothing left to do.
    [ "$(grep -c "stagehand: epilog: job $JOB_ID: moved .*/$n/job_$JOB_ID to the trash" "$STAGEHAND_CLUSTER_DIR/log/slurmd-$n.log")" -eq 1 ]
    [ "$(grep -c "epilog: job $JOB_ID: moved" <<<"$lines")" -eq 0 ]
  done
  [ ! -e "$d1" ]
  [ ! -e "$d2" ]
  assert_nodes_idle
}

@test "without the daemons nothing is left in the node's base: no second directory in the trash" {
  "$CLUSTER" daemon-stop node1
  "$CLUSTER" daemon-stop node2
  submit -N2 --tmpdir --wrap "'srun -N2 -n2 bash -c \"touch \\\$SLURM_TMPDIR/x\"'"
  [ "$JOB_RC" -eq 0 ]
  script_lines "$JOB_ID"
  for n in node1 node2; do
    ls -A "$SCRATCH/$n"
    [ -z "$(ls -A "$SCRATCH/$n")" ]
  done
  assert_nodes_idle
}

@test "--tmpdir=keep: the directory is kept with its data, on both nodes" {
  submit -N2 --tmpdir=keep --wrap "'srun -N2 -n2 bash -c \"echo data-\\\$SLURMD_NODENAME >\\\$SLURM_TMPDIR/result\"'"
  [ "$JOB_RC" -eq 0 ]
  script_lines "$JOB_ID"
  sleep 4 # (the daemons' next collection: a kept directory is not theirs to remove)
  for n in node1 node2; do
    d=$(job_dir "$n" "$JOB_ID")
    [ "$(cat "$d/result")" = "data-$n" ]
    [ "$(stat -c '%U %a' "$d")" = "$STAGEHAND_TEST_USER 700" ]
    [ -f "$SCRATCH/$n/.keep.job_$JOB_ID" ]
    rm -rf "$d" "$SCRATCH/$n/.keep.job_$JOB_ID"
  done
  assert_nodes_idle
}

# stage_out_once DIR: a job on node1 writes out/r and --stage-out's it to so/DIR, which must get
# it, with exactly one line of the job in its log. Sets JOB_ID.
stage_out_once() {
  submit -N1 -w node1 "--stage-out=out:so/$1" --wrap "'mkdir \$SLURM_TMPDIR/out && echo result >\$SLURM_TMPDIR/out/r'"
  [ "$JOB_RC" -eq 0 ]
  wait_copied "$JOB_ID" "$WORK/so/$1/$LOG"
  script_lines "$JOB_ID"
  cat "$WORK/so/$1/$LOG"
  [ "$(cat "$WORK/so/$1/r")" = result ]
  [ "$(grep -c "job $JOB_ID node" "$WORK/so/$1/$LOG")" -eq 1 ]
}

@test "--stage-out with the daemon: delivered exactly once, the directory removed" {
  stage_out_once d
  [ ! -e "$(job_dir node1 "$JOB_ID")" ]
  [ -z "$(ls -A "$SCRATCH/node1" | grep "job_$JOB_ID" || true)" ]
  assert_nodes_idle
}

@test "--stage-out without the daemon: the epilog copies exactly once, the directory removed" {
  "$CLUSTER" daemon-stop node1
  stage_out_once n
  [ -z "$(ls -A "$SCRATCH/node1")" ]
  assert_nodes_idle
}

@test "--stage-out with --tmpdir=keep: copied exactly once and the directory kept" {
  submit -N1 -w node1 --tmpdir=keep --stage-out=out:so/k --wrap "'mkdir \$SLURM_TMPDIR/out && echo result >\$SLURM_TMPDIR/out/r'"
  [ "$JOB_RC" -eq 0 ]
  wait_copied "$JOB_ID" "$WORK/so/k/$LOG" kept
  script_lines "$JOB_ID"
  cat "$WORK/so/k/$LOG"
  [ "$(cat "$WORK/so/k/r")" = result ]
  [ "$(grep -c "job $JOB_ID node" "$WORK/so/k/$LOG")" -eq 1 ]
  d=$(job_dir node1 "$JOB_ID")
  [ "$(cat "$d/out/r")" = result ]
  [ -f "$SCRATCH/node1/.keep.job_$JOB_ID" ]
  rm -rf "$d" "$SCRATCH/node1/.keep.job_$JOB_ID"
  assert_nodes_idle
}
