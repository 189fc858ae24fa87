#!/usr/bin/env bats
# Root's work on job directories against what jobs leave behind (issue 10, items 1-5 and 12): a
# requeued kept job keeps its directory while it runs, prologs and epilogs stay bounded, a removal
# that fails halfway is GC's and said once, a hung FUSE mount holds nothing, and a base under a
# directory others can write is refused. No node ever drains.

load helpers

HANGFS=$STAGEHAND_SOURCE_DIR/tests/unit/data/hangfs.py
STAGEHAND=$STAGEHAND_BUILD_DIR/helper/stagehand
DAEMON_LOG=$STAGEHAND_CLUSTER_DIR/log/stagehandd-node1.log

teardown_file() {
  local pid
  pid=$(cat "$STAGEHAND_CLUSTER_DIR/hangfs.pid" 2>/dev/null || true)
  [ -z "$pid" ] || kill_recorded "$pid" "$HANGFS $STAGEHAND_CLUSTER_DIR/"
  # Only this cluster's (clusters run side by side in CI; another's test may have one mounted).
  awk -v dir="$(realpath "$STAGEHAND_CLUSTER_DIR")/" \
    '{for (i = 7; i < NF; i++) if ($i == "-" && $(i + 1) == "fuse" && $(i + 2) == "hangfs" && index($5, dir) == 1) print $5}' \
    /proc/self/mountinfo | while read -r m; do umount -l "$m"; done
  rm -f "$STAGEHAND_CLUSTER_DIR/hangfs.pid"
  if mountpoint -q "$STAGEHAND_CLUSTER_DIR/disk"; then umount -l "$STAGEHAND_CLUSTER_DIR/disk"; fi
  rm -f "$STAGEHAND_CLUSTER_DIR/disk.img"
}

trash_of() { ls -A "${2:-$SCRATCH/node1}" | grep "^\.trash\.job_$1\." || true; }

wait_gone() {
  local i
  for i in $(seq 1 "${2:-120}"); do [ -e "$1" ] || return 0; sleep 0.5; done
  return 1
}

@test "a requeued --tmpdir=keep job keeps its directory while it runs: another job's prolog and gc leave it" {
  KEEP_FOR=2s set_tmpdir_config ""
  script requeue-keep.sh <<'EOF2'
#!/bin/bash
touch "$SLURM_TMPDIR/run-${SLURM_RESTART_COUNT:-0}"
echo "run ${SLURM_RESTART_COUNT:-0}"
[ -n "$SLURM_RESTART_COUNT" ] || sleep 300
for i in $(seq 1 240); do [ -e "release-$SLURM_JOB_ID" ] && break; sleep 0.5; done
ls -A "$SLURM_TMPDIR" | sed 's/^/has: /'
EOF2
  id=$(as_user "sbatch --parsable --requeue --open-mode=append -N1 -w node1 --tmpdir=keep -o out.%j requeue-keep.sh")
  d=$(job_dir node1 "$id")
  for _ in $(seq 1 60); do [ -e "$d/run-0" ] && break; sleep 0.5; done
  [ -e "$d/run-0" ]
  scontrol requeue "$id" # the first run's epilog keeps its directory and writes a keep marker
  for _ in $(seq 1 120); do [ -e "$d/run-1" ] && break; sleep 0.5; done
  [ -e "$d/run-1" ]
  [ ! -e "$d/run-0" ] # a fresh directory
  [ ! -e "$SCRATCH/node1/.keep.job_$id" ] # the first run's marker went with its directory
  sleep 3 # keep_for (2 s) of the first run has passed
  # Another job starts on the node; gc runs, by hand and every gc_interval in the daemon.
  submit -N1 -w node1 --tmpdir --wrap true
  [ "$JOB_RC" -eq 0 ]
  run "$STAGEHAND" gc --config "$STAGEHAND_TEST_CONFIG" --node node1
  echo "$output"
  [ "$status" -eq 0 ]
  ! echo "$output" | grep -q "job_$id" || false
  sleep 7
  [ -e "$d/run-1" ]
  touch "$WORK/release-$id"
  wait_job_done "$id"
  out=$(cat "$WORK/out.$id"); echo "$out"
  echo "$out" | grep -qx "has: run-1"
  [ "$(scontrol show job "$id" -o | grep -o 'JobState=[A-Z]*')" = JobState=COMPLETED ]
}

@test "a prolog never removes another job's directory; GC, off the critical path, does" {
  "$STAGEHAND_SOURCE_DIR/tests/cluster/cluster.sh" daemon-stop node1 # no GC while the prolog runs
  b=$SCRATCH/node1
  mkdir -m 0700 "$b/job_900001" "$b/job_900002" "$b/.trash.job_900003.1" "$b/.new.job_900004.1.0"
  for e in job_900001 job_900002 .trash.job_900003.1 .new.job_900004.1.0; do
    echo left >"$b/$e/data"; chown -R "$STAGEHAND_TEST_USER:" "$b/$e"; touch -d '2 hours ago' "$b/$e"
  done
  echo "$(($(date +%s) - 3600)) $(stat -c %i "$b/job_900001")" >"$b/.keep.job_900001" # expired an hour ago
  submit -N1 -w node1 --tmpdir --wrap "'ls -d \$SLURM_TMPDIR'"
  [ "$JOB_RC" -eq 0 ]
  for e in job_900001 job_900002 .trash.job_900003.1 .new.job_900004.1.0; do
    [ "$(cat "$b/$e/data")" = left ]
  done
  grep "prolog: job $JOB_ID: created" "$STAGEHAND_CLUSTER_DIR/log/slurmd-node1.log"
  ! grep "prolog: job $JOB_ID:" "$STAGEHAND_CLUSTER_DIR/log/slurmd-node1.log" | grep -q removed || false
  "$STAGEHAND_SOURCE_DIR/tests/cluster/cluster.sh" daemon-start node1
  for e in job_900001 job_900002 .trash.job_900003.1 .new.job_900004.1.0; do wait_gone "$b/$e"; done
  [ ! -e "$b/.keep.job_900001" ]
}

@test "without a daemon an epilog facing a huge tree returns at its budget; the rest waits in the trash; gc removes it" {
  # The scratch base on a disk filesystem (ext4 on a loop device) for this test: on a tmpfs, as CI
  # runs the clusters, 1,000,000 removals may fit in the epilog's 3 s budget, and this test is
  # about the budget running out.
  disk=$STAGEHAND_CLUSTER_DIR/disk
  mkdir -p "$disk"
  truncate -s 4G "$STAGEHAND_CLUSTER_DIR/disk.img"
  mkfs.ext4 -q -F -N 1100000 "$STAGEHAND_CLUSTER_DIR/disk.img"
  mount -o loop "$STAGEHAND_CLUSTER_DIR/disk.img" "$disk"
  chmod 0755 "$disk"
  TMPDIR_BASE="$disk/%n" set_tmpdir_config ""
  "$STAGEHAND_SOURCE_DIR/tests/cluster/cluster.sh" daemon-stop node1
  submit_million_files -N1 -w node1
  line=$(grep "epilog: job $JOB_ID:" "$STAGEHAND_CLUSTER_DIR/log/slurmd-node1.log")
  echo "$line"
  echo "$line" | grep -q 'no daemon'
  echo "$line" | grep -q 'time budget'
  [ -n "$(trash_of "$JOB_ID" "$disk/node1")" ]
  assert_nodes_healthy
  for _ in 1 2 3 4 5; do
    "$STAGEHAND" gc --config "$STAGEHAND_TEST_CONFIG" --node node1 >/dev/null 2>&1 && break || true
  done
  [ -z "$(trash_of "$JOB_ID" "$disk/node1")" ]
  set_tmpdir_config ""
  umount "$disk"
  rm -f "$STAGEHAND_CLUSTER_DIR/disk.img"
}

@test "a bind mount left in a job's directory: the epilog detaches it (what it bound untouched) and everything goes" {
  mkdir -p "$STAGEHAND_CLUSTER_DIR/bind-src"; echo root-data >"$STAGEHAND_CLUSTER_DIR/bind-src/keep"
  id=$(as_user "sbatch --parsable -N1 -w node1 --tmpdir -o out.%j --wrap 'touch \$SLURM_TMPDIR/plain; sleep 300'")
  d=$(job_dir node1 "$id")
  for _ in $(seq 1 100); do [ -e "$d/plain" ] && break; sleep 0.2; done
  mkdir "$d/mnt"
  mount --bind "$STAGEHAND_CLUSTER_DIR/bind-src" "$d/mnt"
  scancel "$id"; wait_job_done "$id"
  # Detached by the epilog, in the node's namespace (issue 24, item 3); the daemon removes the rest.
  grep "epilog: job $id: detached 1 mount(s) the user left: $d/mnt; moved $d to the trash" "$STAGEHAND_CLUSTER_DIR/log/slurmd-node1.log"
  ! grep -q "job_$id[^ ]*/mnt " /proc/self/mountinfo || false
  for _ in $(seq 1 120); do [ -z "$(trash_of "$id")" ] && break; sleep 0.5; done
  [ -z "$(trash_of "$id")" ]
  assert_nodes_healthy
  [ "$(cat "$STAGEHAND_CLUSTER_DIR/bind-src/keep")" = root-data ]
}

@test "a hung FUSE mount in SLURM_TMPDIR holds neither the epilog nor GC; the epilog detaches it; the node stays up" {
  id=$(as_user "sbatch --parsable -N1 -w node1 --tmpdir -o out.%j --wrap 'touch \$SLURM_TMPDIR/plain; sleep 300'")
  d=$(job_dir node1 "$id")
  for _ in $(seq 1 100); do [ -e "$d/plain" ] && break; sleep 0.2; done
  mkdir "$d/fuse"
  setsid /usr/bin/python3 "$HANGFS" "$d/fuse" >/dev/null 2>&1 &
  echo $! >"$STAGEHAND_CLUSTER_DIR/hangfs.pid"
  for _ in $(seq 1 100); do grep -q " $d/fuse " /proc/self/mountinfo && break; sleep 0.1; done
  grep -q " $d/fuse " /proc/self/mountinfo
  scancel "$id"
  wait_job_done "$id" # the epilog returned
  grep "epilog: job $id: detached 1 mount(s) the user left: $d/fuse;" "$STAGEHAND_CLUSTER_DIR/log/slurmd-node1.log"
  assert_nodes_healthy
  run timeout -s KILL 60 "$STAGEHAND" gc --config "$STAGEHAND_TEST_CONFIG" --node node1
  echo "$output"
  [ "$status" -ne 137 ] # returned by itself
  run timeout -s KILL 20 "$STAGEHAND" status --json --config "$STAGEHAND_TEST_CONFIG" --node node1
  [ "$status" -eq 0 ] # the daemon answers
  # Detached (never asked anything) and removed.
  for _ in $(seq 1 60); do [ -z "$(trash_of "$id")" ] && break; sleep 0.5; done
  [ -z "$(trash_of "$id")" ]
  ! grep -q "job_$id[^ ]*/fuse " /proc/self/mountinfo || false
  # A job that mounts over its whole directory: the epilog (kept or not) returns too.
  id2=$(as_user "sbatch --parsable -N1 -w node1 --tmpdir=keep -o out.%j --wrap 'sleep 300'")
  d2=$(job_dir node1 "$id2")
  for _ in $(seq 1 100); do [ -d "$d2" ] && break; sleep 0.2; done
  kill_recorded "$(cat "$STAGEHAND_CLUSTER_DIR/hangfs.pid")" "$HANGFS $d/fuse" # (a detached FUSE server may have ended)
  setsid /usr/bin/python3 "$HANGFS" "$d2" >/dev/null 2>&1 &
  echo $! >"$STAGEHAND_CLUSTER_DIR/hangfs.pid"
  for _ in $(seq 1 100); do grep -q " $d2 " /proc/self/mountinfo && break; sleep 0.1; done
  grep -q " $d2 " /proc/self/mountinfo
  scancel "$id2"
  wait_job_done "$id2"
  grep "epilog: job $id2: cannot keep job_$id2: it is a mount point" "$STAGEHAND_CLUSTER_DIR/log/slurmd-node1.log"
  run timeout -s KILL 60 "$STAGEHAND" gc --config "$STAGEHAND_TEST_CONFIG" --node node1
  [ "$status" -ne 137 ]
  assert_nodes_healthy
  # The job ended: its directory's mount is detached and the directory removed.
  for _ in $(seq 1 60); do [ -e "$d2" ] || break; sleep 0.5; done
  [ ! -e "$d2" ]
  ! grep -q " $d2 " /proc/self/mountinfo || false
  kill_recorded "$(cat "$STAGEHAND_CLUSTER_DIR/hangfs.pid")" "$HANGFS $d2"
}

@test "a base under a directory others can write is refused with one line naming it; no drain" {
  open=$STAGEHAND_CLUSTER_DIR/open
  mkdir -p "$open"; chmod 0777 "$open"
  TMPDIR_BASE="$open/scratch/%n" set_tmpdir_config ""
  submit -N1 -w node1 --tmpdir --wrap "'echo should-not-run'"
  [ "$JOB_RC" -ne 0 ]
  echo "$LAST_OUTPUT" | grep -q "no scratch directory on node node1"
  ! echo "$LAST_OUTPUT" | grep -q should-not-run || false
  lines=$(grep "prolog: job $JOB_ID:" "$STAGEHAND_CLUSTER_DIR/log/slurmd-node1.log")
  echo "$lines"
  [ "$(echo "$lines" | wc -l)" -eq 1 ]
  echo "$lines" | grep -q "$open/scratch/node1: refused: $open is writable by others"
  [ ! -e "$open/scratch" ]
  assert_nodes_healthy
}
