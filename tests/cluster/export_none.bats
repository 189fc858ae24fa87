#!/usr/bin/env bats
# sbatch --export=NONE (and SBATCH_EXPORT=NONE, the default at some sites): the batch step and its
# steps still get --tmpdir, --stage-data and --ddp-env. Seen before: the batch step got none of
# them (no SLURM_TMPDIR, nothing staged, no MASTER_ADDR) and the job "succeeded".

load helpers

setup_file() {
  mkdir -p "$STAGEHAND_CLUSTER_DIR/work/exportnone"
  echo "staged under --export=NONE" >"$STAGEHAND_CLUSTER_DIR/work/exportnone/f.txt"
  chown -R "$STAGEHAND_TEST_USER" "$STAGEHAND_CLUSTER_DIR/work/exportnone"
}

# The batch script: no PATH under --export=NONE, hence the absolute paths (srun: the cluster's).
write_script() {
  sed "s|@SRUN@|${STAGEHAND_SLURM_BIN:-/usr/bin}/srun|" <<'EOF' | script exportnone.sh
#!/bin/bash
echo "batch ${SLURM_TMPDIR:-none} ${MASTER_ADDR:-none} ${NNODES:-none} ${RANK:-norank}"
/bin/cat "$SLURM_TMPDIR/exportnone/f.txt"
@SRUN@ /bin/bash -c 'echo "step $SLURMD_NODENAME ${SLURM_TMPDIR:-none} ${RANK:-none} ${WORLD_SIZE:-none}"; /bin/cat "$SLURM_TMPDIR/exportnone/f.txt"'
EOF
}

check_output() {
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -qx "batch $(job_dir node1 "$JOB_ID") node1 2 norank"
  [ "$(echo "$LAST_OUTPUT" | grep -cx 'staged under --export=NONE')" -eq 3 ]
  echo "$LAST_OUTPUT" | grep -qx "step node1 $(job_dir node1 "$JOB_ID") 0 2"
  echo "$LAST_OUTPUT" | grep -qx "step node2 $(job_dir node2 "$JOB_ID") 1 2"
  # Staged once per node, the batch step's staging counting for node1.
  [ "$(echo "$LAST_OUTPUT" | grep -c '^stagehand: node1: copied .*exportnone')" -eq 1 ]
  [ "$(echo "$LAST_OUTPUT" | grep -c '^stagehand: node2: copied .*exportnone')" -eq 1 ]
}

@test "sbatch --export=NONE: the batch step and its steps get --tmpdir, --stage-data and --ddp-env" {
  write_script
  submit --export=NONE -N2 -n2 --stage-data=exportnone --ddp-env exportnone.sh
  check_output
}

@test "SBATCH_EXPORT=NONE: the same" {
  write_script
  sbatch_wait SBATCH_EXPORT=NONE -N2 -n2 --stage-data=exportnone --ddp-env exportnone.sh
  check_output
}

@test "--export=NONE with --tmpdir alone: SLURM_TMPDIR in the batch step, nothing else" {
  submit --export=NONE -N1 --tmpdir --wrap "'echo batch \${SLURM_TMPDIR:-none} \${MASTER_ADDR:-none}'"
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -qx "batch $(job_dir node1 "$JOB_ID") none"
}
