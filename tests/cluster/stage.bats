#!/usr/bin/env bats
# --stage-data on a real two-node cluster: checked at submit as the user, staged once per node
# as the user, byte-identical, and hostile input fails the job, not the node.

load helpers

setup_file() {
  W=$STAGEHAND_CLUSTER_DIR/work
  rm -rf "$W/data"
  mkdir -p "$W/data/tree/sub/deeper" "$W/data/tree/empty"
  echo hello >"$W/data/tree/sub/a.txt"
  seq 1 20000 >"$W/data/tree/sub/deeper/numbers.txt"
  head -c 300000 /dev/urandom >"$W/data/tree/blob.bin"
  chmod 0750 "$W/data/tree/sub/deeper/numbers.txt"
  ln -s ../blob.bin "$W/data/tree/sub/link"
  (cd "$W/data/tree" && tar czf ../tree.tar.gz . && zip -qry --symlinks ../tree.zip .)
  head -c 100000 /dev/urandom >"$W/data/plain.bin"
  cp "$W/data/tree.tar.gz" "$W/data/packed.tar.gz"
  echo secret >"$W/data/root-only.txt"
  chown -R "$STAGEHAND_TEST_USER:" "$W/data"
  chown root: "$W/data/root-only.txt"; chmod 0600 "$W/data/root-only.txt"
  python3 "$STAGEHAND_SOURCE_DIR/tests/unit/data/hostile_archives.py" "$W/data" "$STAGEHAND_CLUSTER_DIR/outside" >/dev/null 2>&1 || true
  mkdir -p "$STAGEHAND_CLUSTER_DIR/outside"; echo root >"$STAGEHAND_CLUSTER_DIR/outside/sentinel"
  chown "$STAGEHAND_TEST_USER:" "$W"/data/*.tar*
  mkdir -p "$W/data/train"
  python3 -c "
import random
random.seed(3)
with open('$W/data/train/train.txt', 'w') as f:
    for _ in range(512):
        x = [random.gauss(0, 1) for _ in range(10)]
        f.write(' '.join(f'{v:.5f}' for v in x + [sum(x) / 10 + 0.5]) + '\\n')
"
  tar czf "$W/data/train.tar.gz" -C "$W/data/train" . && chown "$STAGEHAND_TEST_USER:" "$W/data/train.tar.gz"
  if [ -x "$STAGEHAND_BUILD_DIR/examples/ddp_train/ddp_train" ]; then
    install -m 0755 "$STAGEHAND_BUILD_DIR/examples/ddp_train/ddp_train" "$W/"
  fi
}

@test "a 2-node job stages a directory, a tar.gz and a plain file; both nodes hold byte-identical trees" {
  script check.sh <<'EOF2'
#!/bin/bash
srun -N2 --ntasks-per-node=1 bash -c '
  cd "$SLURM_TMPDIR"
  diff -r --no-dereference "$SLURM_SUBMIT_DIR/data/tree" data/tree && echo "tree ok on $SLURMD_NODENAME"
  diff -r --no-dereference "$SLURM_SUBMIT_DIR/data/tree" data/tree-from-tar && echo "tar ok on $SLURMD_NODENAME"
  cmp "$SLURM_SUBMIT_DIR/data/plain.bin" data/plain.bin && echo "file ok on $SLURMD_NODENAME"
  # Read through the node daemon (a miss) or not, the job gets its own files with the source'"'"'s modes.
  test "$(stat -c "%U %a" data/tree/sub/deeper/numbers.txt)" = "$(id -un) $(stat -c %a "$SLURM_SUBMIT_DIR/data/tree/sub/deeper/numbers.txt")" &&
    echo "mode ok on $SLURMD_NODENAME"'
EOF2
  submit -N2 --stage-data=data/tree,data/tree.tar.gz:data/tree-from-tar,data/plain.bin check.sh
  [ "$JOB_RC" -eq 0 ]
  for n in node1 node2; do
    for what in tree tar file mode; do echo "$LAST_OUTPUT" | grep -qx "$what ok on $n"; done
  done
  # One summary line per source per node, naming what, where, files, bytes and seconds.
  [ "$(echo "$LAST_OUTPUT" | grep -c '^stagehand: node1: ')" -eq 3 ]
  [ "$(echo "$LAST_OUTPUT" | grep -c '^stagehand: node2: ')" -eq 3 ]
  echo "$LAST_OUTPUT" | grep -Eq '^stagehand: node2: unpacked .*/data/tree.tar.gz -> .*/job_[0-9]+/data/tree-from-tar: [0-9]+ files, .* in [0-9.]+ s'
  [ ! -e "$(job_dir node1 "$JOB_ID")" ] && [ ! -e "$(job_dir node2 "$JOB_ID")" ]
}

@test "a zip is unpacked, and :copy keeps an archive packed" {
  submit -N1 --stage-data=data/tree.zip,data/packed.tar.gz::copy --wrap "'cd \$SLURM_TMPDIR && diff -r --no-dereference \$SLURM_SUBMIT_DIR/data/tree data/tree && cmp data/packed.tar.gz \$SLURM_SUBMIT_DIR/data/packed.tar.gz && echo both-ok'"
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -qx both-ok
}

@test "4 tasks on a node stage once" {
  submit -N1 -n4 --wrap "'srun --stage-data=data/tree.tar.gz:t -n4 bash -c \"ls \\\$SLURM_TMPDIR/t/sub/a.txt\"'"
  [ "$JOB_RC" -eq 0 ]
  [ "$(echo "$LAST_OUTPUT" | grep -c '^stagehand: node1: unpacked')" -eq 1 ]
  [ "$(echo "$LAST_OUTPUT" | grep -c 'sub/a.txt$')" -eq 4 ]
}

@test "a missing source is refused at submit with one line naming it, nothing queued" {
  before=$(squeue -h | wc -l)
  run as_user "sbatch --stage-data=data/imagnet --wrap true"
  [ "$status" -ne 0 ]
  [ "$(echo "$output" | grep -c 'stagehand: --stage-data: data/imagnet: no such file or directory (relative to ')" -eq 1 ]
  [ "$(squeue -h | wc -l)" -eq "$before" ]
}

@test "an unreadable (root-only) source is refused at submit" {
  run as_user "sbatch --stage-data=data/root-only.txt --wrap true"
  [ "$status" -ne 0 ]
  echo "$output" | grep -q 'stagehand: --stage-data: data/root-only.txt: permission denied'
}

@test "escaping or overlapping destinations are refused at submit" {
  run as_user "sbatch --stage-data=data/plain.bin:../../etc/x --wrap true"
  [ "$status" -ne 0 ]
  echo "$output" | grep -q 'must stay inside SLURM_TMPDIR'
  run as_user "sbatch --stage-data=data/plain.bin:/abs --wrap true"
  echo "$output" | grep -q 'must be relative to SLURM_TMPDIR'
  run as_user "sbatch --stage-data=data/tree:d,data/plain.bin:d/x --wrap true"
  [ "$status" -ne 0 ]
  echo "$output" | grep -q 'overlaps'
}

@test "allowed_roots and max_bytes are enforced at submit" {
  set_tmpdir_config "" $'[stage]\nallowed_roots = ["/nonexistent-root"]'
  run as_user "sbatch --stage-data=data/plain.bin --wrap true"
  [ "$status" -ne 0 ]
  echo "$output" | grep -q 'is not under \[stage\] allowed_roots'
  set_tmpdir_config "" $'[stage]\nmax_bytes = "50K"'
  run as_user "sbatch --stage-data=data/plain.bin --wrap true"
  [ "$status" -ne 0 ]
  echo "$output" | grep -q 'over \[stage\] max_bytes 51200'
}

@test "a hostile archive fails the job with one line naming it; nothing outside is touched; no drain" {
  submit -N1 --stage-data=data/symlink-then-write.tar --wrap "'echo should-not-run'"
  [ "$JOB_RC" -ne 0 ]
  echo "$LAST_OUTPUT" | grep -q 'stagehand: --stage-data: /.*/data/symlink-then-write.tar: entry "evil/escaped": "evil" is a symlink or a file, not a directory: refused (node node1)'
  ! echo "$LAST_OUTPUT" | grep -q should-not-run || false
  [ "$(ls -A "$STAGEHAND_CLUSTER_DIR/outside")" = sentinel ]
  [ ! -e "$(job_dir node1 "$JOB_ID")" ]
}

@test "a bomb over max_bytes fails the job and leaves no partial data" {
  set_tmpdir_config "" $'[stage]\nmax_bytes = "10M"'
  submit -N1 --stage-data=data/bomb.tar.gz --wrap "'ls -A \$SLURM_TMPDIR'"
  [ "$JOB_RC" -ne 0 ]
  echo "$LAST_OUTPUT" | grep -q 'unpacks to more than 10485760 bytes (limit) (node node1)'
}

@test "a source that vanished after submission fails the job, not the node" {
  as_user "cp data/plain.bin data/vanishing.bin"
  id=$(as_user "sbatch --parsable --hold -N1 --stage-data=data/vanishing.bin -o out.%j --wrap true")
  rm -f "$WORK/data/vanishing.bin"
  scontrol release "$id"
  wait_job_done "$id"
  out=$(cat "$WORK/out.$id"); echo "$out"
  echo "$out" | grep -q 'stagehand: --stage-data: .*vanishing.bin: no such file or directory'
  [ "$(scontrol show job "$id" -o | grep -o 'JobState=[A-Z]*')" = JobState=FAILED ]
}

@test "a staging helper killed by a signal fails the job with one line saying so; no drain" {
  helper=$STAGEHAND_CLUSTER_DIR/lib/stagehand
  cp -p "$helper" "$helper.real"
  printf '#!/bin/sh\nkill -KILL $$\n' >"$helper"
  submit -N1 --stage-data=data/plain.bin --wrap "'echo should-not-run'"
  mv -f "$helper.real" "$helper"
  [ "$JOB_RC" -ne 0 ]
  [ "$(echo "$LAST_OUTPUT" | grep -c 'stagehand: --stage-data: the staging helper was killed by signal 9 (SIGKILL) on node node1$')" -eq 1 ]
  ! echo "$LAST_OUTPUT" | grep -q should-not-run || false
  [ ! -e "$(job_dir node1 "$JOB_ID")" ]
}

@test "an srun step adds its own --stage-data to a job that staged already; later steps reuse both" {
  submit -N1 -n2 --stage-data=data/plain.bin --wrap "'srun -n2 --stage-data=data/tree.tar.gz:extra bash -c \"ls \\\$SLURM_TMPDIR/extra/sub/a.txt \\\$SLURM_TMPDIR/plain.bin\"; srun -n2 true'"
  [ "$JOB_RC" -eq 0 ]
  [ "$(echo "$LAST_OUTPUT" | grep -c '^stagehand: node1: copied .*/data/plain.bin')" -eq 1 ]
  [ "$(echo "$LAST_OUTPUT" | grep -c '^stagehand: node1: unpacked .*/data/tree.tar.gz')" -eq 1 ]
  [ "$(echo "$LAST_OUTPUT" | grep -c 'extra/sub/a.txt$')" -eq 2 ]
}

@test "the LibTorch example trains on -N2 -n4 from data staged into SLURM_TMPDIR" {
  [ -x "$WORK/ddp_train" ] || { echo "examples/ddp_train was not built (LibTorch missing)"; false; }
  submit -N2 -n4 --ddp-env --stage-data=data/train.tar.gz:train --wrap "'srun bash -c \"./ddp_train --steps 30 --data \\\$SLURM_TMPDIR/train/train.txt\"'"
  [ "$JOB_RC" -eq 0 ]
  [ "$(echo "$LAST_OUTPUT" | grep -c 'parameters identical on all ranks: yes')" -eq 4 ]
}
