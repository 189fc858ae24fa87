#!/usr/bin/env bash
# The demo: installs the Debian packages, builds, starts a local two-node Slurm cluster with
# stagehand loaded, runs a job that stages a small dataset archive onto both nodes (--stage-data),
# shows --tmpdir and --ddp-env, trains the LibTorch example on the staged data, and stops the cluster.
# Run as root; pass --keep-running to leave the cluster up (stop it with
# tests/cluster/cluster.sh stop).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${STAGEHAND_BUILD_DIR:-$root/build}
keep=no
[ "${1:-}" = "--keep-running" ] && keep=yes

[ "$(id -u)" -eq 0 ] || { echo "demo.sh: run as root (it starts munged, slurmctld and slurmd)" >&2; exit 1; }
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null
"$root/tests/cluster/cluster.sh" start "$build/plugin/stagehand.so"
[ "$keep" = yes ] || trap '"$root/tests/cluster/cluster.sh" stop' EXIT
eval "$("$root/tests/cluster/cluster.sh" env)"
work=$STAGEHAND_CLUSTER_DIR/work

install -m 0644 "$root/examples/ddp_python/allreduce.py" "$work/"
# A small dataset as users keep them: a compressed tar on the shared filesystem.
python3 - "$work/dataset" <<'PY'
import os, random, sys
os.makedirs(sys.argv[1], exist_ok=True)
random.seed(7)
with open(os.path.join(sys.argv[1], "train.txt"), "w") as f:
    for _ in range(2048):
        x = [random.gauss(0, 1) for _ in range(10)]
        y = sum((i + 1) / 10 * v for i, v in enumerate(x)) + 0.5
        f.write(" ".join(f"{v:.5f}" for v in x + [y]) + "\n")
PY
tar czf "$work/dataset.tar.gz" -C "$work/dataset" . && rm -rf "$work/dataset"
chown "$STAGEHAND_TEST_USER:" "$work/dataset.tar.gz"
[ -x "$build/examples/ddp_train/ddp_train" ] && install -m 0755 "$build/examples/ddp_train/ddp_train" "$work/"
cat >"$work/demo.sbatch" <<'JOB'
#!/bin/bash
#SBATCH -N2 -n4 --ddp-env --stage-data=dataset.tar.gz
echo "== --tmpdir (implied by --stage-data): batch script on $SLURMD_NODENAME: SLURM_TMPDIR=$SLURM_TMPDIR"
srun -N2 -n2 -l bash -c '
  echo "hello from $SLURMD_NODENAME" > "$SLURM_TMPDIR/hello.txt"
  echo "$SLURMD_NODENAME: SLURM_TMPDIR=$SLURM_TMPDIR ($(stat -c "%U, mode %a" "$SLURM_TMPDIR")), TMPDIR=$TMPDIR"'
echo "== --ddp-env: what each task gets"
srun -l bash -c 'echo "MASTER_ADDR=$MASTER_ADDR MASTER_PORT=$MASTER_PORT WORLD_SIZE=$WORLD_SIZE RANK=$RANK LOCAL_RANK=$LOCAL_RANK LOCAL_WORLD_SIZE=$LOCAL_WORLD_SIZE NODE_RANK=$NODE_RANK"' | sort
echo "== --ddp-env: PyTorch all_reduce across both nodes (init_method=env://)"
srun python3 allreduce.py | sort
if [ -x ./ddp_train ]; then
  echo "== the LibTorch example, training on the dataset staged into each node's SLURM_TMPDIR"
  srun bash -c './ddp_train --steps 100 --data "$SLURM_TMPDIR/dataset/train.txt"' 2>&1 | sort
fi
JOB
chmod 0755 "$work/demo.sbatch"

echo
echo "\$ sbatch -N2 -n4 --ddp-env --stage-data=dataset.tar.gz demo.sbatch     (as user $STAGEHAND_TEST_USER)"
id=$(runuser -u "$STAGEHAND_TEST_USER" -- env SLURM_CONF="$SLURM_CONF" bash -c \
  "cd '$work' && sbatch --parsable --wait -o demo.%j.out demo.sbatch")
for _ in $(seq 1 40); do [ -z "$(squeue -h -j "$id" -o %i)" ] && break; sleep 0.5; done
echo "---- job $id output ----"
cat "$work/demo.$id.out"
echo "---- after the job ----"
for n in node1 node2; do
  d=$STAGEHAND_SCRATCH/$n/job_$id
  if [ -e "$d" ]; then echo "$n: $d still exists (unexpected)"; else echo "$n: $d removed"; fi
done
sinfo -N
