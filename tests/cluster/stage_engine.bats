#!/usr/bin/env bats
# --stage-data's engine on a real cluster against what jobs and users do (issue 10, items 6, 7, 8
# and 12): staging never deletes what the job made, any dataset shape stages with few descriptors
# (in the job and through the daemon), a FIFO swapped in mid-staging fails the job at once, and the
# staging helper runs with its own limits.

load helpers


setup_file() {
  require_sharedfs
  W=$STAGEHAND_CLUSTER_DIR/work
  rm -rf "$W/eng" "$W/slow-src" "$W/slow"
  mkdir -p "$W/eng/tree/sub" "$W/slow-src/dir" "$W/slow"
  echo from-shared >"$W/eng/plain.bin"
  echo t >"$W/eng/tree/sub/f"
  tar czf "$W/eng/tree.tar.gz" -C "$W/eng/tree" .
  echo second >"$W/eng/second.bin"
  # 25,000 directories (ImageNet-21k has 21,841 class folders) and a 500-deep chain.
  (cd "$W/eng" && mkdir wide && cd wide && for i in $(seq 1 250); do mkdir "c$i" && (cd "c$i" && mkdir $(seq -f 'n%03g' 1 100)); done)
  echo leaf >"$W/eng/wide/c250/n100/f"
  /usr/bin/python3 -c "
import os
os.chdir('$W/eng'); os.mkdir('deep'); os.chdir('deep')
for _ in range(500):
    os.mkdir('d'); os.chdir('d')
open('f', 'w').write('bottom')
"
  head -c 16M /dev/urandom >"$W/slow-src/dir/big.bin"
  chown -R "$STAGEHAND_TEST_USER:" "$W/eng" "$W/slow-src" "$W/slow"
  # A slow shared filesystem (2 MB/s): the first source takes seconds to stage.
  setsid /usr/bin/python3 "$SHAREDFS" "$W/slow-src" "$W/slow" --mbps 2 >"$STAGEHAND_CLUSTER_DIR/log/slowfs.log" 2>&1 &
  # (60 s: a FUSE server in Python starts slowly beside CI's other lanes; 5 s was once too short)
  for _ in $(seq 1 600); do [ -e "$W/slow/.sharedfs-stats" ] && break; sleep 0.1; done
  [ -e "$W/slow/.sharedfs-stats" ]
}

teardown_file() {
  fusermount -u "$STAGEHAND_CLUSTER_DIR/work/slow" 2>/dev/null || umount -l "$STAGEHAND_CLUSTER_DIR/work/slow" || true
  [ ! -e "$STAGEHAND_CLUSTER_DIR/lib/stagehand.real" ] || mv -f "$STAGEHAND_CLUSTER_DIR/lib/stagehand.real" "$STAGEHAND_CLUSTER_DIR/lib/stagehand"
}

@test "a step staging onto what the job made is refused with one line; the job's files stay, with or without the daemon" {
  script own-files.sh <<'EOF2'
#!/bin/bash
mkdir -p "$SLURM_TMPDIR/data/mine"
echo mine >"$SLURM_TMPDIR/data/plain.bin"
echo kept >"$SLURM_TMPDIR/data/mine/f"
srun --stage-data=eng/plain.bin:data/plain.bin true; echo "rc=$?"
cat "$SLURM_TMPDIR/data/plain.bin"
srun --stage-data=eng/tree.tar.gz:data/t2 true; echo "rc2=$?"
cat "$SLURM_TMPDIR/data/mine/f" "$SLURM_TMPDIR/data/t2/sub/f"
EOF2
  for daemon in up down; do
    [ "$daemon" = up ] || "$CLUSTER" daemon-stop node1 KILL # a stale socket: the daemon cannot stage
    submit -N1 -w node1 --tmpdir own-files.sh
    echo "$LAST_OUTPUT"
    [ "$(echo "$LAST_OUTPUT" | grep -c 'data/plain.bin already exists: refused')" -eq 1 ]
    echo "$LAST_OUTPUT" | grep -q '^rc=[1-9]'
    echo "$LAST_OUTPUT" | grep -qx 'mine'
    echo "$LAST_OUTPUT" | grep -qx 'rc2=0'
    echo "$LAST_OUTPUT" | grep -qx 'kept'
    echo "$LAST_OUTPUT" | grep -qx 't'
  done
}

@test "25,000 directories and a 500-deep chain stage under ulimit -n 256, in the job and through the daemon" {
  "$CLUSTER" daemon-stop node1
  (ulimit -n 256 && "$CLUSTER" daemon-start node1)
  grep -E '^Max open files +256 +256' "/proc/$(cat "$STAGEHAND_CLUSTER_DIR/stagehandd-node1.pid")/limits"
  check='ulimit -n; find $SLURM_TMPDIR/eng/wide -type d | wc -l; cat $SLURM_TMPDIR/eng/wide/c250/n100/f; find $SLURM_TMPDIR/eng/deep -name f -exec cat {} +; echo'
  for daemon in up down; do
    [ "$daemon" = up ] || "$CLUSTER" daemon-stop node1 KILL
    rm -f "$WORK"/out.*
    sbatch_wait "ulimit -n 256 &&" -N1 -w node1 --stage-data=eng/wide,eng/deep --wrap "'$check'"
    echo "$SUBMIT_OUTPUT"; echo "$LAST_OUTPUT"
    [ "$JOB_RC" -eq 0 ]
    echo "$LAST_OUTPUT" | grep -qx 256
    echo "$LAST_OUTPUT" | grep -qx 25251 # wide, 250 class folders, 25,000 below them
    echo "$LAST_OUTPUT" | grep -qx leaf
    echo "$LAST_OUTPUT" | grep -qx bottom
    if [ "$daemon" = up ]; then
      echo "$LAST_OUTPUT" | grep -q 'eng/deep -> .* (cache \(miss\|hit\))$'
      ! echo "$LAST_OUTPUT" | grep -q 'could not stage' || false
    else
      echo "$LAST_OUTPUT" | grep -q 'copied .*eng/wide -> .*: 1 files, .* (no cache)$'
    fi
  done
}

@test "a source swapped for a FIFO while an earlier one stages fails the job at once with one line" {
  "$CLUSTER" daemon-stop node1 KILL # in the job: the path that opened sources a second time
  stats=$WORK/slow/.sharedfs-stats
  id=$(as_user "sbatch --parsable -N1 -w node1 --stage-data=slow/dir:first,eng/second.bin -o out.%j --wrap 'echo should-not-run'")
  # Swap once the copy of the first source is well under way.
  for _ in $(seq 1 300); do
    n=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['files'].get('/dir/big.bin', 0))" "$stats")
    [ "$n" -gt 2000000 ] && break
    sleep 0.1
  done
  as_user "rm eng/second.bin && mkfifo eng/second.bin"
  wait_job_done "$id" # a FIFO opened for reading would hang the job here
  out=$(cat "$WORK/out.$id"); echo "$out"
  as_user "rm -f eng/second.bin && echo second > eng/second.bin"
  [ "$(echo "$out" | grep -c 'eng/second.bin: is a FIFO, device or socket, not a file or directory: refused')" -eq 1 ]
  ! echo "$out" | grep -q should-not-run || false
  [ "$(scontrol show job "$id" -o | grep -o 'JobState=[A-Z]*')" = JobState=FAILED ]
  [ "$n" -lt 16777216 ] # the swap came while the first source was staging
  assert_nodes_healthy
}

@test "the staging helper runs with its own limits: core size 0, open files 1024, whatever the job's" {
  helper=$STAGEHAND_CLUSTER_DIR/lib/stagehand
  cp -p "$helper" "$helper.real"
  printf '#!/bin/sh\ncat /proc/self/limits >"%s/helper-limits"\nexec "%s.real" "$@"\n' "$WORK" "$helper" >"$helper"
  rm -f "$WORK/helper-limits"
  sbatch_wait "ulimit -S -c unlimited && ulimit -S -n 4096 &&" -N1 -w node1 --stage-data=eng/plain.bin --wrap "'ulimit -c; ulimit -n'"
  mv -f "$helper.real" "$helper"
  echo "$LAST_OUTPUT"; cat "$WORK/helper-limits"
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -qx unlimited # the job's own limits are the job's
  echo "$LAST_OUTPUT" | grep -qx 4096
  grep -E '^Max core file size +0 +0 ' "$WORK/helper-limits"
  grep -E '^Max open files +1024 ' "$WORK/helper-limits"
}
