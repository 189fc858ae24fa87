#!/usr/bin/env bats
# --ddp-env on a real two-node cluster, proven by PyTorch itself (gloo all-reduce across nodes)
# and by the LibTorch example.

load helpers

setup_file() {
  install -m 0644 "$STAGEHAND_SOURCE_DIR/examples/ddp_python/allreduce.py" "$STAGEHAND_CLUSTER_DIR/work/"
  if [ -x "$STAGEHAND_BUILD_DIR/examples/ddp_train/ddp_train" ]; then
    install -m 0755 "$STAGEHAND_BUILD_DIR/examples/ddp_train/ddp_train" "$STAGEHAND_CLUSTER_DIR/work/"
  fi
}

# Asserts N lines "rank=R world=N ... ok=True" covering ranks 0..N-1 in $1.
assert_all_ranks_agree() {
  local out=$1 n=$2 r
  [ "$(echo "$out" | grep -c "world=$n .*sum=$((n * (n + 1) / 2)) ok=True")" -eq "$n" ]
  for r in $(seq 0 $((n - 1))); do echo "$out" | grep -q "rank=$r world=$n "; done
}

@test "srun -N2 -n4 --ddp-env: PyTorch gloo all_reduce with init_method=env:// across both nodes" {
  submit -N2 -n4 --wrap "'srun --ddp-env python3 allreduce.py'"
  [ "$JOB_RC" -eq 0 ]
  assert_all_ranks_agree "$LAST_OUTPUT" 4
  echo "$LAST_OUTPUT" | grep -q "node=node1" && echo "$LAST_OUTPUT" | grep -q "node=node2"
}

@test "uneven layout -N2 -n3: WORLD_SIZE 3, LOCAL_WORLD_SIZE per node, all ranks agree" {
  submit -N2 -n3 --wrap "'srun --ddp-env bash -c \"echo layout \\\$SLURMD_NODENAME \\\$LOCAL_WORLD_SIZE\"; srun --ddp-env python3 allreduce.py'"
  [ "$JOB_RC" -eq 0 ]
  assert_all_ranks_agree "$LAST_OUTPUT" 3
  n1=$(echo "$LAST_OUTPUT" | grep -c "^layout node1 ")
  n2=$(echo "$LAST_OUTPUT" | grep -c "^layout node2 ")
  echo "$LAST_OUTPUT" | grep -qx "layout node1 $n1"
  echo "$LAST_OUTPUT" | grep -qx "layout node2 $n2"
}

@test "cyclic distribution: ranks and local ranks follow Slurm's placement" {
  submit -N2 -n4 --wrap "'srun -m cyclic --ddp-env bash -c \"echo placed \\\$RANK \\\$SLURM_PROCID \\\$LOCAL_RANK \\\$SLURM_LOCALID \\\$NODE_RANK \\\$SLURM_NODEID\"; srun -m cyclic --ddp-env python3 allreduce.py'"
  [ "$JOB_RC" -eq 0 ]
  [ "$(echo "$LAST_OUTPUT" | grep -Ec '^placed ([0-9]+) \1 ([0-9]+) \2 ([0-9]+) \3$')" -eq 4 ]
  assert_all_ranks_agree "$LAST_OUTPUT" 4
}

@test "torchrun with no rendezvous arguments: srun -N2 --ntasks-per-node=1 --ddp-env torchrun" {
  submit -N2 --ntasks-per-node=1 --wrap "'srun --ddp-env torchrun --nproc_per_node=2 --redirects 2 --tee 1 allreduce.py'"
  [ "$JOB_RC" -eq 0 ]
  assert_all_ranks_agree "$LAST_OUTPUT" 4
}

@test "the LibTorch example trains on -N2 -n4 and all ranks end with the same parameters" {
  [ -x "$WORK/ddp_train" ] || { echo "examples/ddp_train was not built (LibTorch missing)"; false; }
  submit -N2 -n4 --wrap "'srun --ddp-env ./ddp_train --steps 50'"
  [ "$JOB_RC" -eq 0 ]
  [ "$(echo "$LAST_OUTPUT" | grep -c 'parameters identical on all ranks: yes')" -eq 4 ]
}

@test "two concurrent steps of one job, both with --ddp-env, both complete on different ports" {
  submit -N2 -n4 --wrap "'srun --exact -N2 -n2 --ddp-env python3 allreduce.py > a.\$SLURM_JOB_ID & srun --exact -N2 -n2 --ddp-env python3 allreduce.py > b.\$SLURM_JOB_ID & wait'"
  [ "$JOB_RC" -eq 0 ]
  a=$(cat "$WORK/a.$JOB_ID"); b=$(cat "$WORK/b.$JOB_ID")
  assert_all_ranks_agree "$a" 2
  assert_all_ranks_agree "$b" 2
  pa=$(echo "$a" | grep -o 'port=[0-9]*' | sort -u); pb=$(echo "$b" | grep -o 'port=[0-9]*' | sort -u)
  [ "$(echo "$pa" | wc -l)" -eq 1 ] && [ "$(echo "$pb" | wc -l)" -eq 1 ] && [ "$pa" != "$pb" ]
}

@test "a user-set MASTER_PORT survives; a [ddp.env] default appears; a user-set one wins over it" {
  set_tmpdir_config "" $'[ddp.env]\nNCCL_DEBUG = "WARN"\nNCCL_SOCKET_IFNAME = "lo"'
  submit -N2 -n2 --wrap "'MASTER_PORT=29555 NCCL_DEBUG=INFO srun --ddp-env bash -c \"echo vars \\\$MASTER_PORT \\\$NCCL_DEBUG \\\$NCCL_SOCKET_IFNAME \\\$MASTER_ADDR\"'"
  [ "$JOB_RC" -eq 0 ]
  [ "$(echo "$LAST_OUTPUT" | grep -cx 'vars 29555 INFO lo node1')" -eq 2 ]
}

@test "the batch script gets MASTER_ADDR and NNODES and no rank; its steps get their own values" {
  submit -N2 -n2 --ddp-env --wrap "'echo batch \$MASTER_ADDR \$NNODES \${RANK:-none} \${MASTER_PORT:-none}; srun -N1 -n1 -w node2 bash -c \"echo step \\\$MASTER_ADDR \\\$NNODES \\\$RANK \\\$WORLD_SIZE\"'"
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -qx "batch node1 2 none none"
  echo "$LAST_OUTPUT" | grep -qx "step node2 1 0 1"
}

@test "no TORCHELASTIC_* variable is ever set" {
  submit -N2 --ntasks-per-node=1 --wrap "'srun --ddp-env=auto env'"
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -q '^PET_RDZV_CONF=is_host=1,read_timeout=3600,join_timeout=3600$'
  echo "$LAST_OUTPUT" | grep -q '^PET_RDZV_CONF=is_host=0,read_timeout=3600,join_timeout=3600$'
  ! echo "$LAST_OUTPUT" | grep -q '^TORCHELASTIC_' || false
}

@test "a bad --ddp-env value is refused at submit, nothing queued" {
  before=$(squeue -h | wc -l)
  run as_user "sbatch --ddp-env=mpi --wrap true"
  [ "$status" -ne 0 ]
  echo "$output" | grep -q 'stagehand: --ddp-env: unknown value "mpi" (expected auto, tasks or torchrun)'
  [ "$(squeue -h | wc -l)" -eq "$before" ]
}
