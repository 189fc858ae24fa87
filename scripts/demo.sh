#!/usr/bin/env bash
# The demo: installs the Debian packages, builds, starts a local two-node Slurm cluster with
# stagehand loaded, runs a job that stages a small dataset archive onto both nodes (--stage-data),
# shows --tmpdir and --ddp-env, trains the LibTorch example on the staged data, and stops the cluster.
# Run as root; pass --keep-running to leave the cluster up (stop it with
# tests/cluster/cluster.sh stop).
#
# It numbers its steps and says how long each usually takes. Configure and build write their
# output to $build/demo-configure.log and $build/demo-build.log and print a progress line instead
# (every 15 s, or in place on a terminal); on a failure the log's last 40 lines. ccache is used
# when installed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${STAGEHAND_BUILD_DIR:-$root/build}
keep=no
[ "${1:-}" = "--keep-running" ] && keep=yes

[ "$(id -u)" -eq 0 ] || { echo "demo.sh: run as root (it starts munged, slurmctld and slurmd)" >&2; exit 1; }

# 12 -> 12s, 75 -> 1m15s
fmt_secs() {
  if [ "$1" -lt 60 ]; then echo "${1}s"; else printf '%dm%02ds\n' $(($1 / 60)) $(($1 % 60)); fi
}

# step TEXT [HOW LONG]: the next numbered step's line; step_done: its time.
step_no=0
steps=6
[ "$keep" = yes ] && steps=5
step() {
  step_no=$((step_no + 1))
  step_start=$SECONDS
  echo
  echo "== [$step_no/$steps] $1"
  [ -z "${2:-}" ] || echo "   ($2)"
}
step_done() { echo "== [$step_no/$steps] done in $(fmt_secs $((SECONDS - step_start)))"; }

# progress LOG: copies its input into LOG and prints a progress line: the time so far, the last
# [ NN%] (Make) or [N/M] (Ninja), how many files were compiled and the one last started; where
# there is none of these (cmake's configure), the last line. Every 15 s as a line of its own, or
# every second in place where stdout is a terminal.
progress() {
  local log=$1 start=$SECONDS last=$SECONDS every=15 tty=no cols=100
  local chunk='' buf='' line pct='' n=0 cur='' text rc
  if [ -t 1 ]; then
    tty=yes every=1
    cols=$(tput cols 2>/dev/null || echo 80)
  fi
  exec 3>"$log"
  while :; do
    if IFS= read -r -t 1 chunk; then
      line=$buf$chunk
      buf=
      printf '%s\n' "$line" >&3
      if [[ $line =~ ^(\[\ *[0-9]+%\]|\[[0-9]+/[0-9]+\]) ]]; then pct=${BASH_REMATCH[1]}; fi
      if [[ $line =~ Building\ (C|CXX)\ object\ (.*)$ ]]; then
        n=$((n + 1))
        cur=${BASH_REMATCH[2]##*/}
        cur=${cur%.o}
      elif [[ $line =~ Linking\ [A-Za-z]+\ [a-z\ ]+\ (.*)$ ]]; then
        cur="linking ${BASH_REMATCH[1]##*/}"
      elif [ -z "$pct" ] && [ -n "$line" ]; then
        cur=$line
      fi
    else
      rc=$?
      if [ "$rc" -gt 128 ]; then # timed out; a partial line is kept for the next read
        buf+=$chunk
      else
        [ -z "$buf$chunk" ] || printf '%s\n' "$buf$chunk" >&3
        break
      fi
    fi
    if [ $((SECONDS - last)) -ge "$every" ]; then
      last=$SECONDS
      text="   ... $(fmt_secs $((SECONDS - start)))"
      [ -z "$pct" ] || text+="  $pct"
      [ "$n" -eq 0 ] || text+="  $n files compiled"
      [ -z "$cur" ] || text+=", last: $cur"
      if [ "$tty" = yes ]; then printf '\r\033[K%s' "${text:0:cols-1}"; else echo "${text:0:160}"; fi
    fi
  done
  exec 3>&-
  [ "$tty" = no ] || printf '\r\033[K'
}

# run_logged WHAT LOG COMMAND...: runs COMMAND with its output into LOG and progress lines on
# stdout; when it fails, the log's last 40 lines and its path, and exits with its status.
run_logged() {
  local what=$1 log=$2 status=0
  shift 2
  "$@" 2>&1 </dev/null | progress "$log" || status=$?
  if [ "$status" -ne 0 ]; then
    {
      echo "demo.sh: $what failed (exit $status); the last 40 lines of its log:"
      tail -n 40 "$log"
      echo "demo.sh: the whole log: $log"
    } >&2
    exit "$status"
  fi
}

# The build's time from scratch, measured: about 4 minutes on an idle 2-core machine (6 on a busy
# one), so about 8 core-minutes; scaled to this machine's cores, never under a minute (linking).
cores=$(nproc)
build_estimate() {
  local s=$((480 / cores)) with="with $cores cores"
  [ "$cores" -ne 1 ] || with="with 1 core"
  if [ "$cores" -le 2 ]; then
    echo "about $((s / 60)) minutes $with, longer while the machine is busy with other work"
  elif [ "$s" -ge 90 ]; then
    echo "about $(((s + 30) / 60)) minutes $with (about 4 on 2 cores)"
  else
    echo "about a minute $with (about 4 on 2 cores)"
  fi
}

# The cluster is stopped on exit (unless --keep-running), whatever stopped the demo; then the total.
demo_start=$SECONDS
cluster_started=no
finish() {
  local status=$?
  if [ "$cluster_started" = yes ] && [ "$keep" != yes ]; then
    step "stopping the cluster (tests/cluster/cluster.sh stop)" "a few seconds"
    "$root/tests/cluster/cluster.sh" stop || echo "demo.sh: stopping the cluster failed" >&2
    step_done
  fi
  echo
  if [ "$status" -eq 0 ]; then
    echo "== demo done in $(fmt_secs $((SECONDS - demo_start)))"
    [ "$keep" = no ] || echo "== the cluster is still up; stop it with: $root/tests/cluster/cluster.sh stop"
  else
    echo "== demo.sh failed (exit $status) after $(fmt_secs $((SECONDS - demo_start)))" >&2
  fi
  exit "$status"
}
trap finish EXIT

echo "stagehand demo, $steps steps. The first run is the long one: several minutes of packages, then the"
echo "build (about 4 minutes on 2 cores); later runs take about a minute."

step "Debian packages (scripts/install-deps.sh)" \
  "the first time it installs them with apt-get: several minutes; afterwards it only checks: instant"
"$root/scripts/install-deps.sh"
step_done

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
step "configuring with cmake into $build" "a few seconds; the log: $build/demo-configure.log"
[ ${#launcher[@]} -eq 0 ] || echo "   ccache is installed: compiling through it (building $build from scratch again takes seconds)"
mkdir -p "$build"
run_logged "configuring (cmake)" "$build/demo-configure.log" \
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}"
step_done

if [ -f "$build/plugin/stagehand.so" ]; then
  how_long="built here before: usually seconds, only what changed is compiled again"
else
  how_long="from scratch: $(build_estimate)"
  # ccache's hits need the same directory: the compile commands name it (measured: 10 s then)
  [ ${#launcher[@]} -eq 0 ] || how_long+="; seconds if ccache has built this directory before"
fi
step "building with $cores parallel jobs" "$how_long; the log: $build/demo-build.log"
run_logged "the build" "$build/demo-build.log" cmake --build "$build" -j"$cores"
step_done

step "starting a local 2-node Slurm cluster with stagehand (tests/cluster/cluster.sh start)" \
  "munged, slurmctld, two slurmd and the stagehand daemons: a few seconds"
"$root/tests/cluster/cluster.sh" start "$build/plugin/stagehand.so"
cluster_started=yes
eval "$("$root/tests/cluster/cluster.sh" env)"
step_done
work=$STAGEHAND_CLUSTER_DIR/work

step "submitting the demo job and waiting for it" \
  "about 30-60 s: staging the dataset onto both nodes, the DDP all_reduce, the LibTorch training"
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
step_done
