#!/usr/bin/env bats
# --stage-out on the two-node cluster: results copied from SLURM_TMPDIR to shared storage when the
# job ends (normally, cancelled, at its time limit), as the job user, whole files, symlinks as
# symlinks, a line per entry in DEST's log; checked at submit; never drains a node.

load helpers

bats_require_minimum_version 1.5.0

LOG=.stagehand-stage-out.log

setup_file() {
  W=$STAGEHAND_CLUSTER_DIR/work
  # The job writes out/ with this script; the test makes the reference copy with the same one.
  cat >"$W/write-out.sh" <<'EOF2'
#!/bin/bash
# write-out.sh DIR: a small tree of results in DIR/out (deterministic content).
set -e
mkdir -p "$1/out/ckpt/deep"
for i in 1 2 3; do printf 'epoch %s\n' "$i" >"$1/out/ckpt/epoch$i.txt"; done
head -c 3000000 /dev/zero | tr '\0' 'w' >"$1/out/ckpt/deep/weights.bin"
echo metrics >"$1/out/metrics.json"
chmod 0640 "$1/out/metrics.json"
ln -sfn ckpt/epoch3.txt "$1/out/latest"
EOF2
  chmod 0755 "$W/write-out.sh"
  printf '#!/bin/bash\nexec "$(dirname "$0")/write-out.sh" "$SLURM_TMPDIR"\n' >"$W/write-here.sh"
  chmod 0755 "$W/write-here.sh"
  rm -rf "$W/so-ref" && mkdir -p "$W/so-ref" && "$W/write-out.sh" "$W/so-ref"
}

setup() {
  rm -rf "$WORK/so" && mkdir -p "$WORK/so" && chown "$STAGEHAND_TEST_USER:" "$WORK/so"
  rm -f "$WORK/$LOG"
}

teardown() {
  if [ -f "$BATS_TEST_TMPDIR/stopped" ]; then # a daemon stopped (SIGSTOP): woken
    kill -CONT "$(cat "$BATS_TEST_TMPDIR/stopped")" 2>/dev/null || true
  fi
  if [ -f "$BATS_TEST_TMPDIR/watcher" ]; then # a test's background watcher, ended with it
    kill "$(cat "$BATS_TEST_TMPDIR/watcher")" 2>/dev/null || true
  fi
}

# DEST holds out/ exactly as the reference (content, symlinks, modes), all owned by the user, no
# temporary files left.
assert_same_out() {
  diff -r --no-dereference -x "$LOG" "$WORK/so-ref/out" "$1"
  [ "$(cd "$WORK/so-ref/out" && find . -printf '%p %y %m\n' | sort)" = "$(cd "$1" && find . ! -name "$LOG" -printf '%p %y %m\n' | sort)" ]
  [ -z "$(find "$1" ! -user "$STAGEHAND_TEST_USER")" ]
  [ -z "$(find "$1" -name '.stagehand-out.*')" ]
}

# With the daemon the copy finishes after the job: waits (at most 60 s) until the log $2 has job
# $1's line, then until no directory of the job is left on node ${3:-node1}.
wait_copied() {
  local i
  for i in $(seq 1 120); do grep -qs "job $1 node" "$2" && break; sleep 0.5; done
  for i in $(seq 1 100); do ls -a "$SCRATCH/${3:-node1}" | grep -q "job_$1\(\.\|$\)" || break; sleep 0.2; done
}

# Waits until job $1 is RUNNING and has made "$2" in its directory on node1.
wait_running() {
  local i
  for i in $(seq 1 60); do
    [ "$(squeue -h -j "$1" -o %T)" = RUNNING ] && [ -e "$(job_dir node1 "$1")/$2" ] && return 0
    sleep 0.5
  done
  return 1
}

@test "--stage-out appears in sbatch, salloc and srun --help" {
  for cmd in sbatch salloc srun; do
    as_user "$cmd --help" | grep -q -- '--stage-out=SRC\[:DEST\]\[,...\]'
  done
}

@test "a job that ends normally leaves out/ in DEST, owned by the user, a summary line in DEST's log" {
  # (srun inside the job inherits the option: it must neither fail nor copy on its own.)
  submit -N1 --stage-out=out:so/runs/%j --wrap "'srun true && \$PWD/write-out.sh \$SLURM_TMPDIR'"
  [ "$JOB_RC" -eq 0 ]
  dest=$WORK/so/runs/$JOB_ID
  wait_copied "$JOB_ID" "$dest/$LOG"
  assert_same_out "$dest"
  [ "$(grep -c "job $JOB_ID node node1: out -> $dest: 5 files, 3000032 bytes, 1 symlink, [0-9.]* s$" "$dest/$LOG")" -eq 1 ]
  [ "$(stat -c %U "$dest/$LOG")" = "$STAGEHAND_TEST_USER" ]
  # The node's log has it too: the daemon's (it copied), or slurmd's (the epilog did).
  grep -q "job $JOB_ID: stage-out: out -> $dest: 5 files" "$STAGEHAND_CLUSTER_DIR/log/stagehandd-node1.log" "$STAGEHAND_CLUSTER_DIR/log/slurmd-node1.log"
  [ ! -e "$(job_dir node1 "$JOB_ID")" ]
}

@test "several --stage-out (one per #SBATCH line and the command line) add up" {
  script two-outs.sh <<'EOF2'
#!/bin/bash
#SBATCH --stage-out=a:so/two/a
#SBATCH --stage-out=b:so/two/b
mkdir "$SLURM_TMPDIR/a" "$SLURM_TMPDIR/b" "$SLURM_TMPDIR/c"
echo A >"$SLURM_TMPDIR/a/f"; echo B >"$SLURM_TMPDIR/b/f"; echo C >"$SLURM_TMPDIR/c/f"
srun true # a step inherits the job's entries: neither refused nor copied twice
EOF2
  submit -N1 --stage-out=c:so/two/c two-outs.sh
  [ "$JOB_RC" -eq 0 ]
  wait_copied "$JOB_ID" "$WORK/so/two/c/$LOG"
  for x in a b c; do
    wait_copied "$JOB_ID" "$WORK/so/two/$x/$LOG"
    [ "$(cat "$WORK/so/two/$x/f")" = "$(echo "$x" | tr a-z A-Z)" ]
    [ "$(grep -c "job $JOB_ID node node1: $x -> " "$WORK/so/two/$x/$LOG")" -eq 1 ]
  done
}

@test "a job cancelled with scancel mid-run leaves the same out/ in DEST" {
  id=$(as_user "sbatch --parsable -N1 -w node1 --stage-out=out:so/runs/%j -o out.%j --wrap '\$PWD/write-out.sh \$SLURM_TMPDIR; touch \$SLURM_TMPDIR/written; sleep 300'")
  wait_running "$id" written
  as_user "scancel $id"
  wait_job_done "$id"
  wait_copied "$id" "$WORK/so/runs/$id/$LOG"
  assert_same_out "$WORK/so/runs/$id"
  grep -q "job $id node node1: out -> $WORK/so/runs/$id: 5 files, 3000032 bytes" "$WORK/so/runs/$id/$LOG"
  [ ! -e "$(job_dir node1 "$id")" ]
}

@test "a job that hits its 1-minute time limit leaves the same out/ in DEST" {
  submit -N1 -t 1 --stage-out=out:so/runs/%j --wrap "'\$PWD/write-out.sh \$SLURM_TMPDIR; sleep 600'"
  [ "$JOB_RC" -ne 0 ]
  [ "$(scontrol show job "$JOB_ID" -o | grep -o 'JobState=[A-Z]*')" = JobState=TIMEOUT ]
  wait_copied "$JOB_ID" "$WORK/so/runs/$JOB_ID/$LOG"
  assert_same_out "$WORK/so/runs/$JOB_ID"
  grep -q "job $JOB_ID node node1: out -> $WORK/so/runs/$JOB_ID: 5 files, 3000032 bytes" "$WORK/so/runs/$JOB_ID/$LOG"
  [ ! -e "$(job_dir node1 "$JOB_ID")" ]
}

@test "a symlink to a root-only file is copied as a symlink, never its target" {
  secret=$STAGEHAND_CLUSTER_DIR/root-secret
  echo "TOP-SECRET-$RANDOM" >"$secret"
  chmod 0600 "$secret"
  chown root:root "$secret"
  submit -N1 --stage-out=res:so/r --wrap "'mkdir \$SLURM_TMPDIR/res && ln -s $secret \$SLURM_TMPDIR/res/link && echo ok > \$SLURM_TMPDIR/res/ok'"
  [ "$JOB_RC" -eq 0 ]
  wait_copied "$JOB_ID" "$WORK/so/r/$LOG"
  [ -L "$WORK/so/r/link" ]
  [ "$(readlink "$WORK/so/r/link")" = "$secret" ]
  ! grep -rq TOP-SECRET "$WORK/so/r" || false
  [ "$(cat "$WORK/so/r/ok")" = ok ]
  grep -q "res -> $WORK/so/r: 1 file, 3 bytes, 1 symlink" "$WORK/so/r/$LOG"
}

@test "a DEST the user cannot write is refused at submit with one line, nothing queued" {
  mkdir -p "$WORK/so/root-only"
  chown root:root "$WORK/so/root-only"
  chmod 0755 "$WORK/so/root-only"
  before=$(squeue -h | wc -l)
  for cmd in sbatch salloc srun; do
    args="--stage-out=out:so/root-only/%j true"
    if [ "$cmd" = sbatch ]; then args="--stage-out=out:so/root-only/%j --wrap true"; fi
    run as_user "$cmd $args"
    [ "$status" -ne 0 ]
    [ "$(echo "$output" | grep -c 'stagehand: ')" -eq 1 ]
    echo "$output" | grep -q "stagehand: --stage-out: out:so/root-only/%j: $WORK/so/root-only is not writable by you (Permission denied)"
  done
  [ "$(squeue -h | wc -l)" -eq "$before" ]
  run as_user "sbatch --stage-out=/etc/shadow --wrap true"
  [ "$status" -ne 0 ]
  echo "$output" | grep -q 'stagehand: --stage-out: "/etc/shadow": SRC must be relative to SLURM_TMPDIR'
  [ "$(squeue -h | wc -l)" -eq "$before" ]
}

# Waits (at most 90 s: the daemon tries 3 times, 5 s apart) until the log $2 says that job $1's
# results were kept on node1.
wait_kept() {
  local i
  for i in $(seq 1 180); do grep -qs "job $1 node node1: stage-out could not complete" "$2" && return 0; sleep 0.5; done
  return 1
}

cli() { echo "'$STAGEHAND_BUILD_DIR/helper/stagehand' $* --config '$STAGEHAND_TEST_CONFIG' --node node1"; }

# A DEST made unwritable during job $JOB_ID: the results stay on node1, one line says where and why
# (DEST cannot take it: the submit directory's log), status names the path, GC leaves it, the
# node is not drained. Sets KEPT to the directory.
assert_kept() {
  wait_kept "$JOB_ID" "$WORK/$LOG"
  grep -q "job $JOB_ID node node1: out -> $WORK/so/locked/run: not copied: cannot create $WORK/so/locked/run: Permission denied" "$WORK/$LOG"
  KEPT=$(ls -d "$SCRATCH/node1/.stageout.job_$JOB_ID".*)
  [ "$(echo "$KEPT" | wc -l)" -eq 1 ]
  grep -F "job $JOB_ID node node1: stage-out could not complete (out -> $WORK/so/locked/run: not copied: cannot create $WORK/so/locked/run: Permission denied" "$WORK/$LOG" |
    grep -F "the results stay on node node1 in $KEPT until " | grep -qF "\`stagehand stage-out retry $JOB_ID\` on that node copies them again"
  diff -r --no-dereference "$WORK/so-ref/out" "$KEPT/out"
  run as_user "$(cli status)"
  echo "$output" | grep -F "$JOB_ID" | grep -F "stage-out failed, kept until" | grep -qF "$KEPT"
  run --separate-stderr as_user "$(cli status --json)"
  echo "$output" | python3 -c "
import json, sys
jobs = json.load(sys.stdin)['jobs']
assert any(j['job_id'] == $JOB_ID and j['dir'] == '$KEPT' and j['state'].startswith('stage-out failed, kept until') for j in jobs), jobs
"
  "$STAGEHAND_BUILD_DIR/helper/stagehand" gc --config "$STAGEHAND_TEST_CONFIG" --node node1
  [ -d "$KEPT/out" ]
  assert_nodes_healthy
  [ "$(scontrol show job "$JOB_ID" -o | grep -o 'JobState=[A-Z]*')" = JobState=COMPLETED ]
}

@test "a DEST that becomes unwritable during the job: the results stay on the node, status names them, the user's retry after the fix delivers them, then they go" {
  as_user "mkdir -p so/locked"
  submit -N1 -w node1 --stage-out=out:so/locked/run --wrap "'\$PWD/write-out.sh \$SLURM_TMPDIR && chmod 0555 \$PWD/so/locked'"
  [ "$JOB_RC" -eq 0 ]
  assert_kept
  grep -q "job $JOB_ID: stage-out could not complete (out -> $WORK/so/locked/run: not copied" "$STAGEHAND_CLUSTER_DIR/log/stagehandd-node1.log"
  # Someone else's retry is refused; the owner's, once DEST is fixed, delivers and removes.
  run as_user "$(cli stage-out retry 999999)"
  [ "$status" -eq 1 ]
  [[ "$output" == *"no stage-out results of job 999999 are kept on node node1"* ]]
  chmod 0755 "$WORK/so/locked"
  run as_user "$(cli stage-out retry "$JOB_ID")"
  echo "$output"
  [ "$status" -eq 0 ]
  assert_same_out "$WORK/so/locked/run"
  [ ! -e "$KEPT" ]
  ! ls -a "$SCRATCH/node1" | grep "job_$JOB_ID" || false
  grep -q "job $JOB_ID node node1: out -> $WORK/so/locked/run: 5 files, [0-9]* bytes, 1 symlink" "$WORK/so/locked/run/$LOG"
  run as_user "$(cli stage-out retry "$JOB_ID")"
  [ "$status" -eq 1 ]
  rm -rf "$WORK/so/locked"
}

@test "without the daemon, the epilog keeps the results of a copy that failed; the user's retry delivers them, root's also removes them" {
  "$STAGEHAND_SOURCE_DIR/tests/cluster/cluster.sh" daemon-stop node1 KILL
  as_user "mkdir -p so/locked"
  submit -N1 -w node1 --stage-out=out:so/locked/run --wrap "'\$PWD/write-out.sh \$SLURM_TMPDIR && chmod 0555 \$PWD/so/locked'"
  [ "$JOB_RC" -eq 0 ]
  assert_kept
  grep -q "stage-out could not complete" "$STAGEHAND_CLUSTER_DIR/log/slurmd-node1.log"
  # Still unwritable: the user's retry says why, and the results stay.
  run as_user "$(cli stage-out retry "$JOB_ID")"
  [ "$status" -eq 1 ]
  [[ "$output" == *"out -> $WORK/so/locked/run: not copied: cannot create $WORK/so/locked/run: Permission denied"* ]]
  [ -d "$KEPT/out" ]
  # Fixed: the user's own retry (no daemon: in their own process) delivers; the copy on the node
  # stays for root or keep_for.
  chmod 0755 "$WORK/so/locked"
  run as_user "$(cli stage-out retry "$JOB_ID")"
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"the copy on the node stays until"* ]]
  assert_same_out "$WORK/so/locked/run"
  [ -d "$KEPT/out" ]
  rm -rf "$WORK/so/locked/run"
  run "$STAGEHAND_BUILD_DIR/helper/stagehand" stage-out retry "$JOB_ID" --config "$STAGEHAND_TEST_CONFIG" --node node1
  echo "$output"
  "$STAGEHAND_SOURCE_DIR/tests/cluster/cluster.sh" daemon-start node1
  [ "$status" -eq 0 ]
  assert_same_out "$WORK/so/locked/run"
  [ ! -e "$KEPT" ]
  ! ls -a "$SCRATCH/node1" | grep "job_$JOB_ID" || false
  rm -rf "$WORK/so/locked"
}

@test "srun --stage-out with its own entries inside a job is refused with one line" {
  submit -N1 --wrap "'srun --stage-out=x true'"
  [ "$JOB_RC" -ne 0 ]
  echo "$LAST_OUTPUT" | grep -q "stagehand: --stage-out: give it to the job"
}

@test "only the first node copies an entry; an entry with %n copies on every node" {
  submit -N2 --stage-out=out:so/first,out:so/%n --wrap "'srun -N2 -n2 \$PWD/write-here.sh'"
  [ "$JOB_RC" -eq 0 ]
  wait_copied "$JOB_ID" "$WORK/so/first/$LOG"
  wait_copied "$JOB_ID" "$WORK/so/node2/$LOG" node2
  assert_same_out "$WORK/so/first"
  assert_same_out "$WORK/so/node1"
  assert_same_out "$WORK/so/node2"
  [ "$(grep -c "job $JOB_ID node" "$WORK/so/first/$LOG")" -eq 1 ]
}

@test "--tmpdir=keep: the copy is made and the directory is kept" {
  submit -N1 --tmpdir=keep --stage-out=out:so/kept --wrap "'\$PWD/write-out.sh \$SLURM_TMPDIR'"
  [ "$JOB_RC" -eq 0 ]
  assert_same_out "$WORK/so/kept"
  d=$(job_dir node1 "$JOB_ID")
  [ -d "$d/out" ]
  rm -rf "$d" "$SCRATCH/node1/.keep.job_$JOB_ID"
}

@test "--tmpdir=keep with a DEST that becomes unwritable: the results are kept aside under a name of their own, and a retry delivers them" {
  as_user "mkdir -p so/locked"
  submit -N1 -w node1 --tmpdir=keep --stage-out=out:so/locked/run --wrap "'\$PWD/write-out.sh \$SLURM_TMPDIR && chmod 0555 \$PWD/so/locked'"
  [ "$JOB_RC" -eq 0 ]
  assert_kept
  # Not job_<id>: a requeued run's prolog would replace that, and its marker expire first.
  [ ! -e "$(job_dir node1 "$JOB_ID")" ]
  [ ! -e "$SCRATCH/node1/.keep.job_$JOB_ID" ]
  chmod 0755 "$WORK/so/locked"
  run as_user "$(cli stage-out retry "$JOB_ID")"
  echo "$output"
  [ "$status" -eq 0 ]
  assert_same_out "$WORK/so/locked/run"
  ! ls -a "$SCRATCH/node1" | grep "job_$JOB_ID" || false
  rm -rf "$WORK/so/locked"
}

@test "with the node's daemon killed (kill -9), the epilog still copies and then removes the scratch directory" {
  "$STAGEHAND_SOURCE_DIR/tests/cluster/cluster.sh" daemon-stop node1 KILL
  submit -N1 -w node1 --stage-out=out:so/nodaemon --wrap "'\$PWD/write-out.sh \$SLURM_TMPDIR'"
  [ "$JOB_RC" -eq 0 ]
  assert_same_out "$WORK/so/nodaemon"
  [ ! -e "$(job_dir node1 "$JOB_ID")" ]
  "$STAGEHAND_SOURCE_DIR/tests/cluster/cluster.sh" daemon-start node1
}

# A daemon that stops answering (stopped here, as one stuck in the kernel would be): the epilog
# gives up on it after 1 s and copies itself. Woken, the daemon drops the hand-over it was sent
# meanwhile: it never copies beside the epilog, nor reports a copy that failed.
@test "with the node's daemon stopped, the epilog copies; woken, the daemon drops the hand-over it was sent meanwhile" {
  pid=$(cat "$STAGEHAND_CLUSTER_DIR/stagehandd-node1.pid")
  echo "$pid" >"$BATS_TEST_TMPDIR/stopped" # (teardown wakes it, whatever happens)
  kill -STOP "$pid"
  submit -N1 -w node1 --stage-out=out:so/stopped --wrap "'\$PWD/write-out.sh \$SLURM_TMPDIR'"
  kill -CONT "$pid"
  [ "$JOB_RC" -eq 0 ]
  assert_same_out "$WORK/so/stopped"
  [ "$(grep -c "job $JOB_ID node node1: out -> $WORK/so/stopped: 5 files" "$WORK/so/stopped/$LOG")" -eq 1 ]
  grep "job $JOB_ID: .*stage-out: out -> .*; no daemon (no answer from the daemon in time (reply))" \
    "$STAGEHAND_CLUSTER_DIR/log/slurmd-node1.log"
  log=$STAGEHAND_CLUSTER_DIR/log/stagehandd-node1.log
  local dropped="a end_job request of uid 0 (job $JOB_ID) dropped: its client gave up waiting before it started"
  for _ in $(seq 1 100); do grep -q "$dropped" "$log" && break; sleep 0.1; done
  grep -q "$dropped" "$log"
  "$STAGEHAND_BUILD_DIR/helper/stagehand" status --config "$STAGEHAND_TEST_CONFIG" --node node1 # it answers
  [ -z "$(grep "job $JOB_ID:" "$log")" ]
  assert_same_out "$WORK/so/stopped"
  [ ! -e "$(job_dir node1 "$JOB_ID")" ]
  [ -z "$(ls -a "$SCRATCH/node1" | grep "job_$JOB_ID")" ]
}

@test "the daemon finishes the copy after the job; killed with kill -9 mid-copy, it resumes after its restart and only then removes the directory" {
  script write-many.sh <<'EOF2'
#!/bin/bash
mkdir -p "$SLURM_TMPDIR/big"
head -c 1048576 /dev/urandom >"$SLURM_TMPDIR/one"
# One process, not 4,000 cp's: on a VM where a fork and exec cost 15 ms they took over a minute.
python3 -c '
import os, sys
d = sys.argv[1]
one = open(d + "/one", "rb").read()
for i in range(1, 4001):
    with open("%s/big/f%d" % (d, i), "wb") as f:
        f.write(one)
' "$SLURM_TMPDIR"
EOF2
  # Not sbatch --wait: its polling backs off to many seconds, and the copy takes about ten.
  JOB_ID=$(as_user "sbatch --parsable -N1 -w node1 --stage-out=big:so/big/%j -o out.%j $WORK/write-many.sh")
  dest=$WORK/so/big/$JOB_ID
  dpid=$(cat "$STAGEHAND_CLUSTER_DIR/stagehandd-node1.pid")
  # The daemon's copy (its child as the job user) stopped (SIGSTOP) as soon as its first file is
  # there: however fast this machine copies 4 GB, the kill -9 below comes mid-copy, and the stopped
  # child dies with the daemon (its parent-death signal is SIGKILL).
  (
    shopt -s nullglob
    for _ in $(seq 1 60000); do
      got=("$dest"/* "$dest"/*/*)
      if [ ${#got[@]} -gt 0 ]; then
        pkill -STOP -u "$STAGEHAND_TEST_USER" -P "$dpid"
        exit 0
      fi
      sleep 0.01
    done
    exit 1
  ) 3>&- &
  watcher=$!
  echo "$watcher" >"$BATS_TEST_TMPDIR/watcher" # (ended by teardown, whatever happens)
  wait_job_done "$JOB_ID" || wait_job_done "$JOB_ID" # writing 4000 files may take more than 30 s
  [ "$(scontrol show job "$JOB_ID" -o | grep -o 'JobState=[A-Z]*')" = JobState=COMPLETED ]
  grep "job $JOB_ID" "$STAGEHAND_CLUSTER_DIR/log/stagehandd-node1.log" || true
  # The job has left the node; the daemon copies in the background and lists it as pending.
  run --separate-stderr "$STAGEHAND_BUILD_DIR/helper/stagehand" status --json --config "$STAGEHAND_TEST_CONFIG" --node node1
  [ "$status" -eq 0 ]
  echo "$output" | python3 -c "
import json, sys
jobs = json.load(sys.stdin)['jobs']
assert any(j['job_id'] == $JOB_ID and j['state'].startswith('stage-out pending') for j in jobs), jobs
"
  wait "$watcher" # the copy began and is stopped
  "$STAGEHAND_SOURCE_DIR/tests/cluster/cluster.sh" daemon-stop node1 KILL
  copied=$(find "$dest" -name 'f*' | wc -l)
  echo "# copied before kill -9: $copied of 4000 files" >&3
  [ "$copied" -lt 4000 ]
  ! grep -qs "job $JOB_ID" "$dest/$LOG" || false
  ls -a "$SCRATCH/node1" | grep -q "^.stageout.job_$JOB_ID\."
  "$STAGEHAND_SOURCE_DIR/tests/cluster/cluster.sh" daemon-start node1
  for _ in $(seq 1 240); do grep -qs "job $JOB_ID node node1: big -> $dest: 4000 files, 4194304000 bytes" "$dest/$LOG" && break; sleep 0.5; done
  grep -q "job $JOB_ID node node1: big -> $dest: 4000 files, 4194304000 bytes" "$dest/$LOG"
  [ "$(find "$dest" -type f -name 'f*' -size 1048576c | wc -l)" -eq 4000 ]
  [ -z "$(find "$dest" ! -user "$STAGEHAND_TEST_USER")" ]
  [ -z "$(find "$dest" -name '.stagehand-out.*')" ]
  rm -rf "$dest"
  for _ in $(seq 1 100); do ls -a "$SCRATCH/node1" | grep -q "job_$JOB_ID" || break; sleep 0.2; done
  ! ls -a "$SCRATCH/node1" | grep "job_$JOB_ID" || false
  grep -q "job $JOB_ID: stage-out: resuming the copy" "$STAGEHAND_CLUSTER_DIR/log/stagehandd-node1.log"
}
