#!/usr/bin/env bats
# The installed package on a real two-node cluster: plugstack names the packaged stagehand.so
# with no helper=, so staging runs the packaged /usr/bin/stagehand the plugin was built to find.
# Run by scripts/ci/package-install.sh (cluster.sh start --installed), never from a build tree.

load ../cluster/helpers

setup_file() {
  W=$STAGEHAND_CLUSTER_DIR/work
  rm -rf "$W/pkgdata"
  mkdir -p "$W/pkgdata/tree/sub"
  echo hello >"$W/pkgdata/tree/sub/a.txt"
  head -c 200000 /dev/urandom >"$W/pkgdata/tree/blob.bin"
  tar czf "$W/pkgdata/tree.tar.gz" -C "$W/pkgdata/tree" .
  chown -R "$STAGEHAND_TEST_USER:" "$W/pkgdata"
}

@test "the installed binaries are the ones in use" {
  [ "$(command -v stagehand)" = /usr/bin/stagehand ]
  grep -q "^required /usr/lib/.*/slurm-wlm/stagehand.so config=" "$STAGEHAND_CLUSTER_DIR/etc/plugstack.conf"
  ! grep -q "helper=" "$STAGEHAND_CLUSTER_DIR/etc/plugstack.conf" || false
  run /usr/bin/stagehand check-config /etc/slurm/stagehand.toml
  [ "$status" -eq 0 ]
  [[ "$output" == *"/etc/slurm/stagehand.toml: ok"* ]]
}

@test "a two-node job with --tmpdir --stage-data --ddp-env runs from the installed plugin and CLI" {
  script pkgjob.sh <<'EOF2'
#!/bin/bash
srun -N2 --ntasks-per-node=1 bash -c '
  cd "$SLURM_TMPDIR"
  diff -r "$SLURM_SUBMIT_DIR/pkgdata/tree" pkgdata/tree && diff -r "$SLURM_SUBMIT_DIR/pkgdata/tree" pkgdata/tree-tar &&
    echo "staged ok on $SLURMD_NODENAME"
  echo "ddp $SLURMD_NODENAME rank=$RANK world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT node_rank=$NODE_RANK"
  echo "tmpdir $SLURMD_NODENAME $(stat -c "%U %a" "$SLURM_TMPDIR") $TMPDIR"'
EOF2
  submit -N2 --tmpdir --stage-data=pkgdata/tree,pkgdata/tree.tar.gz:pkgdata/tree-tar --ddp-env pkgjob.sh
  [ "$JOB_RC" -eq 0 ]
  for n in node1 node2; do
    echo "$LAST_OUTPUT" | grep -qx "staged ok on $n"
    echo "$LAST_OUTPUT" | grep -Eq "^tmpdir $n $STAGEHAND_TEST_USER 700 $SCRATCH/$n/job_$JOB_ID\$"
    [ "$(echo "$LAST_OUTPUT" | grep -c "^stagehand: $n: ")" -eq 2 ]
  done
  echo "$LAST_OUTPUT" | grep -Eq '^ddp node1 rank=0 world=2 master=node1:[0-9]+ node_rank=0$'
  echo "$LAST_OUTPUT" | grep -Eq '^ddp node2 rank=1 world=2 master=node1:[0-9]+ node_rank=1$'
  [ ! -e "$(job_dir node1 "$JOB_ID")" ] && [ ! -e "$(job_dir node2 "$JOB_ID")" ]
}
