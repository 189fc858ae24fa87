#!/usr/bin/env bats
# --ddp-env in the step shapes users write besides a plain srun: steps started from a task,
# interactive steps, heterogeneous jobs, torchrun with several tasks per node, ports (the test
# cluster has MpiParams=ports=, so every step has reserved ports) and the warnings.

load helpers

setup_file() {
  install -m 0644 "$STAGEHAND_SOURCE_DIR/examples/ddp_python/allreduce.py" "$STAGEHAND_CLUSTER_DIR/work/"
}

# Asserts N lines "rank=R world=N ... ok=True" covering ranks 0..N-1 in $1.
assert_all_ranks_agree() {
  local out=$1 n=$2 r
  [ "$(echo "$out" | grep -c "world=$n .*sum=$((n * (n + 1) / 2)) ok=True")" -eq "$n" ]
  for r in $(seq 0 $((n - 1))); do echo "$out" | grep -q "rank=$r world=$n "; done
}

# The last port of the cluster's MpiParams=ports= range.
resv_range() { sed -n 's/^MpiParams=ports=//p' "$SLURM_CONF"; }

@test "srun inside an --ddp-env task: the inner step gets its own ranks and port, never the outer task's" {
  # Seen before: the four inner tasks got RANK=0 WORLD_SIZE=1 and the outer MASTER_PORT (the
  # nested srun does not pass --ddp-env on; the inner step inherited the outer task's values).
  script nested.sh <<'EOF'
#!/bin/bash
srun -N1 -n1 --ddp-env bash -c '
  echo "outer $RANK $WORLD_SIZE $MASTER_PORT ${PET_NNODES:-nopet}"
  srun --overlap -N2 -n4 bash -c "echo inner \$RANK \$WORLD_SIZE \$MASTER_PORT \${PET_NNODES:-nopet}"
  srun --overlap -N2 -n4 python3 allreduce.py'
EOF
  submit -N2 -n8 nested.sh
  [ "$JOB_RC" -eq 0 ]
  outer_port=$(echo "$LAST_OUTPUT" | sed -n 's/^outer 0 1 \([0-9]*\) 1$/\1/p')
  [ -n "$outer_port" ]
  [ "$(echo "$LAST_OUTPUT" | grep -Ec '^inner [0-3] 4 [0-9]+ nopet$')" -eq 4 ]
  ! echo "$LAST_OUTPUT" | grep -q "^inner .* $outer_port " || false
  assert_all_ranks_agree "$LAST_OUTPUT" 4
}

@test "salloc's interactive step and srun --pty bash get job-level values; steps typed there their own" {
  script inter.sh <<'EOF'
echo "shell $MASTER_ADDR $NNODES ${RANK:-norank} ${MASTER_PORT:-noport}"
srun --overlap -N2 -n2 bash -c 'echo typed $RANK $WORLD_SIZE ${MASTER_PORT:+port}' </dev/null
exit
EOF
  # A terminal, as a user at a keyboard has: salloc's default command is then the interactive
  # step (LaunchParameters=use_interactive_step), `srun --pty` gets its pseudo-terminal. (The
  # typed srun reads nothing: srun forwards its stdin to task 0, and would take the `exit` line
  # with it; the session would then last until the timeout.) Each session ends by its `exit`.
  run as_user "timeout 60 script -qec 'salloc -N2 -n4 --ddp-env' /dev/null < inter.sh"
  echo "$output"
  [ "$status" -eq 0 ]
  # (a terminal echoes the typed lines, unexpanded, and wraps output in escape sequences)
  [ "$(echo "$output" | grep -ac 'shell node1 2 norank noport')" -eq 1 ]
  [ "$(echo "$output" | grep -aEc 'typed [01] 2 port')" -eq 2 ]
  run as_user "timeout 60 script -qec 'salloc -N2 -n4 --quiet srun --pty -N1 -n1 --ddp-env bash' /dev/null < inter.sh"
  echo "$output"
  [ "$status" -eq 0 ]
  [ "$(echo "$output" | grep -ac 'shell node1 2 norank noport')" -eq 1 ]
  # The srun typed in `srun --pty --ddp-env bash` did not ask for --ddp-env: its values are its own.
  [ "$(echo "$output" | grep -aEc 'typed [01] 2 port')" -eq 2 ]
}

@test "heterogeneous job: srun --het-group=0,1 --ddp-env is one world of 4, MASTER_ADDR on rank 0's node" {
  # Group 0 on node2: Slurm sorts the step's node list (node[1-2]), so its first host is not
  # rank 0's. All nodes are 127.0.0.1 here, so MASTER_ADDR is checked by name.
  script het.sh <<'EOF'
#!/bin/bash
#SBATCH -N1 -n2 -w node2
#SBATCH hetjob
#SBATCH -N1 -n2 -w node1
srun --het-group=0,1 --ddp-env bash -c 'echo addr $RANK $MASTER_ADDR $MASTER_PORT $SLURMD_NODENAME'
srun --het-group=0,1 --ddp-env python3 allreduce.py
EOF
  submit het.sh
  [ "$JOB_RC" -eq 0 ]
  [ "$(echo "$LAST_OUTPUT" | grep -c '^addr [0-3] node2 ')" -eq 4 ]
  echo "$LAST_OUTPUT" | grep -q '^addr 0 node2 [0-9]* node2$'
  [ "$(echo "$LAST_OUTPUT" | grep '^addr ' | cut -d' ' -f4 | sort -u | wc -l)" -eq 1 ]
  assert_all_ranks_agree "$LAST_OUTPUT" 4
}

@test "heterogeneous step that srun makes itself (srun --ddp-env A : B outside an allocation), and salloc A : B: one world of 4" {
  # Seen before: "heterogeneous step: cannot read SLURM_JOB_NODELIST_HET_GROUP_0" on one node and
  # only Slurm's "task_init() failed" on the other (srun's own het job sets only the _PACK_GROUP_
  # names). --ddp-env given once, on the first component, applies to the whole step.
  echo_rank='bash -c "echo addr \$RANK \$WORLD_SIZE \$MASTER_ADDR \$MASTER_PORT \$SLURMD_NODENAME"'
  run as_user "timeout 120 srun -N1 -n2 -w node2 --ddp-env $echo_rank : -N1 -n2 -w node1 $echo_rank 2>&1;
               timeout 120 srun -N1 -n2 -w node2 --ddp-env python3 allreduce.py : -N1 -n2 -w node1 python3 allreduce.py 2>&1"
  echo "$output"
  [ "$status" -eq 0 ]
  ! echo "$output" | grep -q 'stagehand' || false
  [ "$(echo "$output" | grep -Ec '^addr [0-3] 4 node2 [0-9]+ node[12]$')" -eq 4 ]
  echo "$output" | grep -Eq '^addr 0 4 node2 [0-9]+ node2$'
  [ "$(echo "$output" | grep '^addr ' | cut -d' ' -f5 | sort -u | wc -l)" -eq 1 ]
  assert_all_ranks_agree "$output" 4
  # salloc makes the het job, its srun --het-group=0,1 the step.
  run as_user "timeout 120 salloc -Q -N1 -n2 -w node2 : -N1 -n2 -w node1 srun --het-group=0,1 --ddp-env python3 allreduce.py 2>&1"
  echo "$output"
  [ "$status" -eq 0 ]
  assert_all_ranks_agree "$output" 4
}

@test "--ddp-env=torchrun with several tasks on a node: the step is refused with one line" {
  submit -N2 -n4 --wrap "'srun --ddp-env=torchrun true'"
  [ "$JOB_RC" -ne 0 ]
  [ "$(echo "$LAST_OUTPUT" | grep -c 'stagehand:')" -eq 1 ]
  echo "$LAST_OUTPUT" | grep -q 'stagehand: --ddp-env=torchrun: this step has 4 tasks on 2 nodes; torchrun starts the workers itself, so start one torchrun per node (srun --ntasks-per-node=1)'
  # The other tasks say it in their node's slurmd log (node2 has no rank 0 here).
  grep -q 'stagehand: task [1-3]: --ddp-env=torchrun: this step has 4 tasks on 2 nodes' "$STAGEHAND_CLUSTER_DIR/log/slurmd-node2.log"
}

@test "torchrun mode: PET_NODE_RANK, is_host, rendezvous timeouts and PET_LOCAL_ADDR from the template" {
  set_tmpdir_config "" $'[ddp]\nmaster_addr = "{host}"'
  submit -N2 --ntasks-per-node=1 --wrap "'srun --ddp-env bash -c \"echo pet \\\$SLURMD_NODENAME \\\$NODE_RANK \\\$PET_NODE_RANK \\\$PET_LOCAL_ADDR \\\$PET_RDZV_CONF\"'"
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -qx 'pet node1 0 0 node1 is_host=1,read_timeout=3600,join_timeout=3600'
  echo "$LAST_OUTPUT" | grep -qx 'pet node2 1 1 node2 is_host=0,read_timeout=3600,join_timeout=3600'
}

@test "MpiParams=ports=: MASTER_PORT is the last of the step's reserved ports" {
  range=$(resv_range)
  [ -n "$range" ]
  submit -N2 -n4 --wrap "'srun --ddp-env bash -c \"echo ports \\\$SLURM_STEP_RESV_PORTS \\\$MASTER_PORT\"; srun --ddp-env python3 allreduce.py'"
  [ "$JOB_RC" -eq 0 ]
  line=$(echo "$LAST_OUTPUT" | grep '^ports ' | sort -u)
  [ "$(echo "$line" | wc -l)" -eq 1 ]
  resv=$(echo "$line" | cut -d' ' -f2) port=$(echo "$line" | cut -d' ' -f3)
  [ "$port" -eq "${resv##*[-,]}" ]
  [ "$port" -ge "${range%-*}" ]
  [ "$port" -le "${range#*-}" ]
  assert_all_ranks_agree "$LAST_OUTPUT" 4
}

@test "a computed port that another program holds: node 0's first task fails at once naming the port" {
  # --resv-ports=0: no reserved ports, the computed port; consecutive steps get consecutive ports.
  script busy.sh <<'EOF'
#!/bin/bash
p=$(srun --resv-ports=0 -N1 -n1 --ddp-env bash -c 'echo $MASTER_PORT')
next=$((p == 32767 ? 20000 : p + 1)) # the default [ddp] range
echo "next $next"
python3 -c 'import socket, sys, time; s = socket.socket(); s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(); time.sleep(60)' $next &
until python3 -c 'import socket, sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' $next 2>/dev/null; do sleep 0.1; done
srun --resv-ports=0 -N1 -n1 --ddp-env bash -c 'echo started $MASTER_PORT'
echo "rc=$?"
kill %1
EOF
  submit -N1 busy.sh
  [ "$JOB_RC" -eq 0 ]
  next=$(echo "$LAST_OUTPUT" | sed -n 's/^next //p')
  [ -n "$next" ]
  echo "$LAST_OUTPUT" | grep -qx 'rc=1'
  ! echo "$LAST_OUTPUT" | grep -q '^started' || false
  [ "$(echo "$LAST_OUTPUT" | grep -c 'stagehand:')" -eq 1 ]
  echo "$LAST_OUTPUT" | grep -q "stagehand: --ddp-env: MASTER_PORT $next is already in use on node1 (another program holds it); resubmit, or set MASTER_PORT yourself; your admin can give every step ports of its own with MpiParams=ports= in slurm.conf"
}

@test "one warning per node when tasks outnumber GPUs, and when a torchrun has fewer CPUs than workers" {
  # No GPUs here: CUDA_VISIBLE_DEVICES set by hand shows what Slurm would show on a GPU node.
  script warn.sh <<'EOF'
#!/bin/bash
CUDA_VISIBLE_DEVICES=0 srun -N1 -n2 --ddp-env true                             # 2 tasks, 1 GPU
CUDA_VISIBLE_DEVICES=0,1 srun -N2 -n2 --ddp-env torchrun --help >/dev/null     # 2 workers, 1 CPU
CUDA_VISIBLE_DEVICES=0,1 srun -N2 -n2 -c2 --ddp-env torchrun --help >/dev/null # 2 CPUs: fine
CUDA_VISIBLE_DEVICES=0,1 srun -N2 -n2 --ddp-env true                           # not torchrun: fine
EOF
  submit -N2 -n4 warn.sh
  [ "$JOB_RC" -eq 0 ]
  [ "$(echo "$LAST_OUTPUT" | grep -c 'stagehand: warning:')" -eq 3 ]
  [ "$(echo "$LAST_OUTPUT" | grep -c 'stagehand: warning: --ddp-env: node1: 2 tasks (LOCAL_WORLD_SIZE) but 1 GPU (CUDA_VISIBLE_DEVICES): tasks will share a GPU')" -eq 1 ]
  for n in node1 node2; do
    [ "$(echo "$LAST_OUTPUT" | grep -c "stagehand: warning: --ddp-env: $n: torchrun will start 2 workers (PET_NPROC_PER_NODE) on 1 CPU; ask for at least one CPU per worker (srun --cpus-per-task=2)")" -eq 1 ]
  done
}
