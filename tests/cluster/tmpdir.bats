#!/usr/bin/env bats
# --tmpdir on a real two-node Slurm cluster, jobs submitted as an ordinary user.

load helpers

@test "2-node job: each node has its own directory, owned by the user, mode 0700" {
  script probe.sh <<'EOF2'
#!/bin/bash
echo "batch $SLURMD_NODENAME $SLURM_TMPDIR $TMPDIR"
srun -N2 -n2 -l bash -c 'echo "task $SLURMD_NODENAME $SLURM_TMPDIR $(stat -c "%U %a" "$SLURM_TMPDIR") $TMPDIR"; touch "$SLURM_TMPDIR/written-by-$SLURMD_NODENAME"'
EOF2
  submit -N2 --tmpdir probe.sh
  [ "$JOB_RC" -eq 0 ]
  d1=$(job_dir node1 "$JOB_ID"); d2=$(job_dir node2 "$JOB_ID")
  echo "$LAST_OUTPUT" | grep -qx "batch node1 $d1 $d1"
  echo "$LAST_OUTPUT" | grep -qx "0: task node1 $d1 $STAGEHAND_TEST_USER 700 $d1"
  echo "$LAST_OUTPUT" | grep -qx "1: task node2 $d2 $STAGEHAND_TEST_USER 700 $d2"
  # Gone on both nodes once the job has ended.
  [ ! -e "$d1" ] && [ ! -e "$d2" ]
}

@test "without --tmpdir and default=false there is no SLURM_TMPDIR" {
  submit -N2 --wrap "'srun -N2 -n2 bash -c \"echo tmpdir=\\\${SLURM_TMPDIR:-unset}\"'"
  [ "$JOB_RC" -eq 0 ]
  [ "$(echo "$LAST_OUTPUT" | grep -c '^tmpdir=unset$')" -eq 2 ]
}

@test "[tmpdir] default = true gives every job the directory" {
  set_tmpdir_config "default = true"
  submit -N1 --wrap "'echo tmpdir=\$SLURM_TMPDIR'"
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -qx "tmpdir=$(job_dir node1 "$JOB_ID")"
}

@test "export_tmpdir = false leaves TMPDIR alone" {
  set_tmpdir_config "export_tmpdir = false"
  submit -N1 --tmpdir --wrap "'echo tmpdir=\$SLURM_TMPDIR TMPDIR=\$TMPDIR'"
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -qx "tmpdir=$(job_dir node1 "$JOB_ID") TMPDIR=/tmp"
}

@test "srun --tmpdir inside a job without it gets the directory for that step only" {
  submit -N1 --wrap "'srun --tmpdir bash -c \"echo step=\\\$SLURM_TMPDIR\"; echo batch=\${SLURM_TMPDIR:-unset}'"
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -qx "step=$(job_dir node1 "$JOB_ID")"
  echo "$LAST_OUTPUT" | grep -qx "batch=unset"
}

@test "symlinks the job plants to root-owned files and directories survive the cleanup" {
  sentinel=$STAGEHAND_CLUSTER_DIR/root-sentinel
  mkdir -p "$sentinel"; echo precious >"$sentinel/file"; chmod 0755 "$sentinel"
  script plant.sh <<EOF2
#!/bin/bash
cd "\$SLURM_TMPDIR"
ln -s "$sentinel" dirlink
ln -s "$sentinel/file" filelink
ln -s /etc etc
mkdir -p sub/deeper && ln -s "$sentinel" sub/deeper/link
EOF2
  submit -N2 --tmpdir plant.sh
  [ "$JOB_RC" -eq 0 ]
  [ "$(cat "$sentinel/file")" = precious ]
  [ -f /etc/passwd ]
  [ ! -e "$(job_dir node1 "$JOB_ID")" ]
}

@test "unreadable (0000) subdirectories and a deep tree are removed" {
  script messy.sh <<'EOF2'
#!/bin/bash
cd "$SLURM_TMPDIR"
p=.; for i in $(seq 1 200); do p=$p/level$i; done; mkdir -p "$p" && touch "$p/leaf"
mkdir -p locked/inner && touch locked/inner/f && chmod 000 locked/inner locked
for i in $(seq 1 2000); do echo $i > "f$i"; done
EOF2
  submit -N1 --tmpdir messy.sh
  [ "$JOB_RC" -eq 0 ]
  [ ! -e "$(job_dir node1 "$JOB_ID")" ]
}

@test "--tmpdir=keep keeps the directory with its data" {
  submit -N1 --tmpdir=keep --wrap "'echo data > \$SLURM_TMPDIR/result'"
  [ "$JOB_RC" -eq 0 ]
  d=$(job_dir node1 "$JOB_ID")
  [ "$(cat "$d/result")" = data ]
  [ -f "$SCRATCH/node1/.keep.job_$JOB_ID" ]
  rm -rf "$d" "$SCRATCH/node1/.keep.job_$JOB_ID"
}

@test "a failing job is cleaned up on every node" {
  submit -N2 --tmpdir --wrap "'srun -N2 -n2 touch \$SLURM_TMPDIR/x; exit 3'"
  [ "$JOB_RC" -ne 0 ]
  [ ! -e "$(job_dir node1 "$JOB_ID")" ] && [ ! -e "$(job_dir node2 "$JOB_ID")" ]
}

@test "a cancelled job is cleaned up on every node" {
  id=$(as_user "sbatch --parsable -N2 --tmpdir -o out.%j --wrap 'srun -N2 -n2 sleep 300'")
  for i in $(seq 1 40); do
    [ -d "$(job_dir node2 "$id")" ] && [ "$(squeue -h -j "$id" -o %T)" = RUNNING ] && break
    sleep 0.5
  done
  [ -d "$(job_dir node1 "$id")" ]
  [ -d "$(job_dir node2 "$id")" ]
  as_user "scancel $id"
  wait_job_done "$id"
  [ ! -e "$(job_dir node1 "$id")" ] && [ ! -e "$(job_dir node2 "$id")" ]
}

@test "an entry planted at the job's path is neither adopted nor a reason to fail" {
  id=$(as_user "sbatch --parsable --hold -N1 -w node1 --tmpdir -o out.%j --wrap 'stat -c \"%U %a %F\" \$SLURM_TMPDIR; ls -A \$SLURM_TMPDIR | wc -l'")
  victim=$STAGEHAND_CLUSTER_DIR/victim; mkdir -p "$victim"; echo keep >"$victim/file"
  ln -s "$victim" "$(job_dir node1 "$id")"
  scontrol release "$id"
  wait_job_done "$id"
  out=$(cat "$WORK/out.$id")
  echo "$out"
  echo "$out" | grep -qx "$STAGEHAND_TEST_USER 700 directory"
  echo "$out" | grep -qx "0"
  [ "$(stat -c %U "$victim")" = root ]
  [ "$(cat "$victim/file")" = keep ]
  [ "$(scontrol show job "$id" -o | grep -o 'JobState=[A-Z]*')" = JobState=COMPLETED ]
}

@test "a bad --tmpdir value is refused at submit with one line, nothing queued" {
  before=$(squeue -h | wc -l)
  run as_user "sbatch --tmpdir=forever --wrap true"
  [ "$status" -ne 0 ]
  echo "$output" | grep -q 'stagehand: --tmpdir: unknown value "forever"'
  [ "$(squeue -h | wc -l)" -eq "$before" ]
}

@test "options appear in sbatch, salloc and srun --help" {
  for cmd in sbatch salloc srun; do
    as_user "$cmd --help" | grep -q -- '--tmpdir'
    as_user "$cmd --help" | grep -q -- '--ddp-env'
  done
}

@test "a requeued job starts with a fresh, empty directory" {
  script requeue.sh <<'EOF2'
#!/bin/bash
ls -A "$SLURM_TMPDIR" | sed 's/^/found: /'
touch "$SLURM_TMPDIR/from-run-${SLURM_RESTART_COUNT:-0}"
echo "run ${SLURM_RESTART_COUNT:-0}"
[ -n "$SLURM_RESTART_COUNT" ] || sleep 300
EOF2
  id=$(as_user "sbatch --parsable --requeue --open-mode=append -N1 -w node1 --tmpdir -o out.%j requeue.sh")
  for i in $(seq 1 40); do [ -e "$(job_dir node1 "$id")/from-run-0" ] && break; sleep 0.5; done
  [ -e "$(job_dir node1 "$id")/from-run-0" ]
  # Slurm restarts a requeued job after the credential lifetime (cred_expire=10 on this cluster),
  # once slurmd has forgotten the first run; forcing it sooner makes slurmd skip the prolog.
  scontrol requeue "$id"
  for i in $(seq 1 120); do
    [ "$(scontrol show job "$id" -o | grep -o 'JobState=[A-Z]*')" = JobState=COMPLETED ] && break
    sleep 0.5
  done
  wait_job_done "$id"
  out=$(cat "$WORK/out.$id")
  echo "$out"
  echo "$out" | grep -qx "run 1"
  ! echo "$out" | grep -q "^found:" || false
  [ ! -e "$(job_dir node1 "$id")" ]
}
