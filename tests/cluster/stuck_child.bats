#!/usr/bin/env bats
# A child that survives SIGKILL (issue 24, item 2): a copy or reader blocked on a user's FUSE server
# that never answers sleeps in the kernel, and SIGKILL does not end it until the server answers.
# The epilog still returns within its budget (no job left COMPLETING, no drained node, the
# results kept), and the daemon's request ends (its thread and in-flight slot come back) and the
# survivor is reaped when the server goes.

load helpers

STUCKFS=$STAGEHAND_SOURCE_DIR/tests/tools/stuckfs.py
STAGEHAND=$STAGEHAND_BUILD_DIR/helper/stagehand
DAEMON_LOG=$STAGEHAND_CLUSTER_DIR/log/stagehandd-node1.log
METRICS=$STAGEHAND_CLUSTER_DIR/log/metrics-node1.prom
MNT=$STAGEHAND_CLUSTER_DIR/work/stuck
TRIGGER=$STAGEHAND_CLUSTER_DIR/work/stuck-now
FSLOG=$STAGEHAND_CLUSTER_DIR/log/stuckfs.log
PIDFILE=$STAGEHAND_CLUSTER_DIR/stuckfs.pid

setup() {
  set_tmpdir_config "" $'[stage]\nout_budget = "10s"'
  rm -f "$TRIGGER" "$FSLOG"
  mkdir -p "$MNT"
  setsid /usr/bin/python3 "$STUCKFS" "$MNT" "$TRIGGER" "$(id -u "$STAGEHAND_TEST_USER")" "$FSLOG" \
    >"$STAGEHAND_CLUSTER_DIR/log/stuckfs.out" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  for _ in $(seq 1 100); do grep -q " $MNT " /proc/self/mountinfo && break; sleep 0.1; done
  grep -q " $MNT " /proc/self/mountinfo
}

# The server goes first (every request it holds then fails and its sleepers end), then the mount:
# lazily, so that nothing here waits on it.
stop_stuckfs() {
  local pid
  pid=$(cat "$PIDFILE" 2>/dev/null || true)
  if [ -n "$pid" ]; then
    kill_recorded "$pid" "$STUCKFS $MNT"
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -f "$PIDFILE"
  if grep -q " $MNT " /proc/self/mountinfo; then fusermount -u -z "$MNT" 2>/dev/null || umount -l "$MNT" || true; fi
}

teardown() {
  stop_stuckfs
  rm -f "$TRIGGER"
  set_tmpdir_config ""
}

status_json() { timeout -s KILL 20 "$STAGEHAND" status --json --config "$STAGEHAND_TEST_CONFIG" --node node1; }

# Seconds until job $1 has left every node (epilogs done), at most $2; fails past it.
seconds_to_done() {
  local start=$SECONDS out
  while [ $((SECONDS - start)) -lt "$2" ]; do
    out=$(timeout 5 squeue -h -j "$1" -t PD,R,CG,S -o %i 2>&1) || true
    if ! grep -qE '^[0-9]+' <<<"$out"; then echo $((SECONDS - start)); return 0; fi
    sleep 0.5
  done
  echo "job $1 still present after $2 s: $(timeout 5 squeue -h -j "$1" -o '%T %r')" >&2
  return 1
}

metric() { awk -v m="$1" '$1 ~ "^"m"[{]" {print $2}' "$METRICS" 2>/dev/null; }

# Waits (at most $2 s) until metric $1 reads $3.
wait_metric() {
  local i
  for i in $(seq 1 "$(($2 * 2))"); do [ "$(metric "$1")" = "$3" ] && return 0; sleep 0.5; done
  echo "metric $1: $(metric "$1"), not $3" >&2
  return 1
}

@test "a --stage-out DEST whose FUSE server stops answering: the epilog returns, no drain, the results are kept" {
  # The job writes its results, then the DEST's server stops answering: the epilog's copy (as the
  # user, --tmpdir=keep copies in the epilog) blocks in the kernel and outlives SIGKILL.
  id=$(as_user "sbatch --parsable -N1 -w node1 --tmpdir=keep --stage-out=res:$MNT/out/run -o out.%j --wrap 'mkdir \$SLURM_TMPDIR/res && echo result >\$SLURM_TMPDIR/res/r.txt && touch $TRIGGER'")
  for _ in $(seq 1 120); do [ -e "$TRIGGER" ] && break; sleep 0.5; done # the job's end
  took=$(seconds_to_done "$id" 90) # was: COMPLETING until the server went
  [ "$(job_exit_code "$id")" -eq 0 ]
  echo "# job $id left the node $took s after it ended (out_budget 10 s)" >&3
  grep -q "hung getattr /out" "$FSLOG" # the copy did reach the server
  line=$(grep "epilog: job $id:" "$STAGEHAND_CLUSTER_DIR/log/slurmd-node1.log")
  echo "$line"
  echo "$line" | grep -q "did not end 3 s after SIGKILL: it is blocked in the kernel (a filesystem that does not answer?); left behind"
  echo "$line" | grep -q "stage-out could not complete"
  # Nothing more is written on the filesystem that hung (the job's log line is skipped), so the
  # epilog returns near out_budget.
  echo "$line" | grep -q "not written to the job's log: the copy was stuck on a filesystem that does not answer"
  assert_nodes_healthy
  [ "$(scontrol show job "$id" -o | grep -o 'JobState=[A-Z]*')" = JobState=COMPLETED ]
  # Kept (issue 23): the results stay on the node under a name of their own, and status says so.
  kept=$(ls -d "$SCRATCH/node1/.stageout.job_$id".*)
  [ "$(cat "$kept/res/r.txt")" = result ]
  status_json | python3 -c "
import json, sys
jobs = json.load(sys.stdin)['jobs']
assert any(j['job_id'] == $id and j['state'].startswith('stage-out failed, kept until') for j in jobs), jobs
"
  # The server goes: the survivor ends (init reaps it; the epilog is long gone).
  stop_stuckfs
  rm -rf "$kept" "$SCRATCH/node1/.failed-stage-out.${kept##*/.}"
}

@test "a --stage-data source whose FUSE server never answers: the job can be cancelled, the daemon's request ends and its survivor is reaped" {
  id=$(as_user "sbatch --parsable -N1 -w node1 --stage-data=$MNT/data:data -o out.%j --wrap true")
  # The daemon's reader (as the user) asked the server for stuck.bin's bytes; the job waits.
  for _ in $(seq 1 120); do grep -q "hung read /data/stuck.bin" "$FSLOG" && break; sleep 0.5; done
  grep -q "hung read /data/stuck.bin" "$FSLOG"
  reader=$(sed -n 's/^hung read .* pid \([0-9]*\)$/\1/p' "$FSLOG" | head -n1)
  [ "$(stat -c %U /proc/"$reader")" = "$STAGEHAND_TEST_USER" ]
  # In flight: status lists it from its first progress frame (every 5 s).
  seen=0
  for _ in $(seq 1 40); do
    run status_json
    [ "$status" -eq 0 ]
    if echo "$output" | python3 -c "import json, sys; sys.exit(0 if json.load(sys.stdin)['stagings'] else 1)"; then seen=1; break; fi
    sleep 0.5
  done
  [ "$seen" -eq 1 ]
  scancel "$id"
  wait_job_done "$id"
  assert_nodes_healthy
  # The reader sleeps in the kernel through SIGKILL; the request still ends: no staging left in
  # flight (was: its thread waited for the reader forever), and the daemon answers throughout.
  done_=0
  start=$SECONDS
  for _ in $(seq 1 60); do
    run status_json
    [ "$status" -eq 0 ]
    if echo "$output" | python3 -c "import json, sys; sys.exit(1 if json.load(sys.stdin)['stagings'] else 0)"; then done_=1; break; fi
    sleep 0.5
  done
  [ "$done_" -eq 1 ]
  echo "# the daemon's request ended $((SECONDS - start)) s after the job was cancelled and left" >&3
  grep "(pid $reader) did not end 3 s after SIGKILL" "$DAEMON_LOG"
  grep -q "State:.D" /proc/"$reader"/status # still there, in the kernel
  wait_metric stagehand_stuck_children 15 1
  # The server goes: the reader ends and the daemon's reaper reaps it (no zombie), and says so.
  stop_stuckfs
  wait_metric stagehand_stuck_children 15 0
  grep "(pid $reader) did not end after SIGKILL; reaped at " "$DAEMON_LOG"
  [ ! -e /proc/"$reader" ]
  # The node still stages through the daemon.
  submit -N1 -w node1 --tmpdir --wrap true
  [ "$JOB_RC" -eq 0 ]
  run status_json
  [ "$status" -eq 0 ]
}
