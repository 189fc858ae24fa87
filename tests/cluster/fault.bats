#!/usr/bin/env bats
# Fault and load tests (issue 10): a user's escaped process racing the epilog and the background
# removal, a staging that fills the node's disk, and a burst of 200 short jobs with every option.

load helpers


setup_file() {
  S=$STAGEHAND_CLUSTER_DIR/fault-sentinel
  rm -rf "$S" && mkdir -p "$S/a/b"
  echo precious >"$S/top"; echo deep >"$S/a/b/file"
  chmod -R go-w "$S"
  mkdir -p "$STAGEHAND_CLUSTER_DIR/work/fault"
  echo burst-data >"$STAGEHAND_CLUSTER_DIR/work/fault/small.txt"
  chown -R "$STAGEHAND_TEST_USER:" "$STAGEHAND_CLUSTER_DIR/work/fault"
}

teardown_file() {
  local pid
  # Racers that outlived their loop bound: only the ones this file started (their pids).
  for pid in $(cat "$STAGEHAND_CLUSTER_DIR/work/racers.pids" 2>/dev/null); do kill_recorded "$pid" "$WORK/racers.pids"; done
  rm -f "$STAGEHAND_CLUSTER_DIR/work/racers.pids"
  if mountpoint -q "$STAGEHAND_CLUSTER_DIR/small"; then # a failed disk-full test: the usual base again
    set_tmpdir_config ""
    restart_daemons
    umount "$STAGEHAND_CLUSTER_DIR/small" || umount -l "$STAGEHAND_CLUSTER_DIR/small"
  fi
}

restart_daemons() {
  local n
  for n in node1 node2; do "$CLUSTER" daemon-stop "$n"; "$CLUSTER" daemon-start "$n"; done
}

# Waits until no job_* directory is left on either node (the epilog renamed them into the trash,
# stagehandd removes the trash in the background): at most 60 s. Prints what is left otherwise.
wait_no_job_dirs() {
  local base=${1:-$SCRATCH} i left
  for i in $(seq 1 120); do
    left=$(find "$base"/node1 "$base"/node2 -mindepth 1 -maxdepth 2 \( -name 'job_*' -o -name '.trash*' \) 2>/dev/null || true)
    [ -z "$left" ] && return 0
    sleep 0.5
  done
  echo "left behind: $left" >&2
  # What Slurm and the hooks said of those jobs: still queued or running, or an epilog's line.
  squeue -a -o '%i %u %T %M %N %j' >&2 || true
  local id
  for id in $(echo "$left" | grep -Eo 'job_[0-9]+' | sort -u | cut -d_ -f2); do
    grep -h "job $id[:;]\\|job_$id\\b\\|JobId=$id\\b" "$STAGEHAND_CLUSTER_DIR"/log/slurm*.log >&2 || true
  done
  return 1
}

@test "a user's escaped process racing the epilog with symlinks to a root tree and to /: sentinels intact, no drain" {
  S=$STAGEHAND_CLUSTER_DIR/fault-sentinel
  rm -f "$WORK/racers.pids"
  # The racer escapes the job (setsid, reparented to init: proctrack/linuxproc loses it) and keeps
  # swapping directories of SLURM_TMPDIR for symlinks, through the epilog's rename and removal.
  script racer.sh <<EOF2
#!/bin/bash
cd "\$SLURM_TMPDIR" || exit 1
mkdir -p d/e/f && for i in \$(seq 1 200); do echo x >d/e/f/\$i; done
setsid bash -c 'echo \$\$ >>"$WORK/racers.pids"; end=\$((SECONDS + 30))
while [ \$SECONDS -lt \$end ]; do
  mkdir -p d/e/f w/x 2>/dev/null; echo y >d/e/f/y 2>/dev/null
  mv -T d d.real 2>/dev/null; ln -sfn "$S" d 2>/dev/null
  mv -T d.real/e d.real/e.real 2>/dev/null; ln -sfn / d.real/e 2>/dev/null
  mv -T w w.real 2>/dev/null; ln -sfn / w 2>/dev/null
  rm -f d w 2>/dev/null; mv -T d.real d 2>/dev/null; mv -T w.real w 2>/dev/null
done' </dev/null >/dev/null 2>&1 &
sleep 0.5
echo racing
EOF2
  local ids=() i id
  for i in $(seq 1 10); do
    id=$(as_user "sbatch --parsable -o out.%j -N1 -w node$((i % 2 + 1)) --tmpdir racer.sh")
    ids+=("$id")
  done
  echo "# racer jobs: ${ids[*]}" >&3
  for id in "${ids[@]}"; do wait_job_done "$id"; done
  for id in "${ids[@]}"; do grep -qx racing "$WORK/out.$id"; done
  [ "$(wc -l <"$WORK/racers.pids")" -eq 10 ]
  # The racers go on against the background removal for a while.
  sleep 5
  for id in $(cat "$WORK/racers.pids"); do kill_recorded "$id" "$WORK/racers.pids"; done
  [ "$(cat "$S/top")" = precious ]
  [ "$(cat "$S/a/b/file")" = deep ]
  [ "$(find "$S" | wc -l)" -eq 5 ]
  [ -s /etc/hostname ]
  [ -d /usr/bin ]
  [ -f "$STAGEHAND_CLUSTER_DIR/etc/slurm.conf" ]
  wait_no_job_dirs
  assert_nodes_healthy
}

# The node's scratch disk is a 30 MB tmpfs; the dataset is 60 MB.
@test "disk full while staging (plain and compressed): one line naming the source, nothing partial left, next job fine" {
  local small=$STAGEHAND_CLUSTER_DIR/small
  mkdir -p "$small"
  mount -t tmpfs -o size=30M,mode=0755 tmpfs "$small"
  mkdir -m 0755 "$small/node1" "$small/node2"
  head -c 60M /dev/urandom >"$WORK/fault/big.bin"
  mkdir -p "$WORK/fault/zeros"
  head -c 60M /dev/zero >"$WORK/fault/zeros/z.bin"
  tar czf "$WORK/fault/big.tar.gz" -C "$WORK/fault/zeros" .
  chown -R "$STAGEHAND_TEST_USER:" "$WORK/fault"
  TMPDIR_BASE="$small/%n" set_tmpdir_config ""
  restart_daemons # a daemon keeps its base until it restarts
  for src in fault/big.bin fault/big.tar.gz; do
    submit -N1 -w node1 --stage-data=$src --wrap "'echo should-not-run'"
    [ "$JOB_RC" -ne 0 ]
    ! echo "$LAST_OUTPUT" | grep -q should-not-run || false
    [ "$(echo "$LAST_OUTPUT" | grep -c "stagehand: --stage-data: .*$src.*No space left on device")" -eq 1 ]
    wait_no_job_dirs "$small"
    [ "$(du -sk "$small" | cut -f1)" -lt 100 ]
  done
  submit -N1 -w node1 --stage-data=fault/small.txt --wrap "'cat \$SLURM_TMPDIR/fault/small.txt'"
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -qx burst-data
  TMPDIR_BASE= set_tmpdir_config ""
  restart_daemons
  umount "$small"
  rm -f "$WORK/fault/big.bin" "$WORK/fault/big.tar.gz"; rm -rf "$WORK/fault/zeros"
  assert_nodes_healthy
}

@test "a burst of 200 short jobs with --tmpdir --stage-data --ddp-env over both nodes: all right, nothing leaked, no drain" {
  local n=${STAGEHAND_BURST_JOBS:-200} i ids=() id start end bad=0
  start=$(date +%s.%N)
  for i in $(seq 1 "$n"); do
    ids+=("$(as_user "sbatch --parsable -o out.burst.%j -N1 --tmpdir --stage-data=fault/small.txt --ddp-env --wrap 'echo \"\$(cat \$SLURM_TMPDIR/fault/small.txt) \$MASTER_ADDR \$NNODES \$SLURMD_NODENAME\"'")")
  done
  for i in $(seq 1 1200); do # all done (at most 10 min)
    [ -z "$(squeue -h -u "$STAGEHAND_TEST_USER" -t PD,R,CG,S -o %i 2>/dev/null)" ] && break
    sleep 0.5
  done
  end=$(date +%s.%N)
  [ -z "$(squeue -h -u "$STAGEHAND_TEST_USER" -o %i)" ]
  for id in "${ids[@]}"; do
    grep -Eqx 'burst-data (node[12]) 1 \1' "$WORK/out.burst.$id" || { echo "job $id:"; cat "$WORK/out.burst.$id"; bad=$((bad + 1)); }
  done
  [ "$bad" -eq 0 ]
  echo "# burst: $n jobs in $(echo "$end - $start" | bc) s: $(echo "scale=2; $n / ($end - $start)" | bc) jobs/s" >&3
  [ "$(cat "$WORK"/out.burst.* | grep -c node1)" -gt 0 ]
  [ "$(cat "$WORK"/out.burst.* | grep -c node2)" -gt 0 ]
  wait_no_job_dirs
  rm -f "$WORK"/out.burst.*
  assert_nodes_healthy
}
