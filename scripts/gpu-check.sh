#!/usr/bin/env bash
# gpu-check: proves the DDP side of stagehand with a machine's own PyTorch, outside Slurm. It
# builds examples/ddp_train against that PyTorch's LibTorch and trains over NCCL (one rank per
# visible GPU) and over Gloo (2 ranks on the CPU), runs examples/ddp_python/allreduce.py the same
# way, and replays the environments recorded from real srun tasks on the test cluster
# (tests/unit/data/step_env) through stagehand's own DDP computation (stagehand-ddp-replay), one
# process per recorded task, and with torchrun per recorded node for the one-task-per-node step.
# Without a GPU the NCCL checks print "SKIPPED: no GPU" and the rest runs on the CPU.
#
#   scripts/gpu-check.sh            (exit 0 when no check failed; SKIPPED is not a failure)
#
# Environment: PYTHON (a python3 that imports torch; default the first of python3,
# /usr/bin/python3 that does), STAGEHAND_DDP_REPLAY (a built stagehand-ddp-replay; default:
# compiled here from bench/ddp_replay.cpp and the library's DDP sources, which need only the C++
# standard library, so no Slurm headers, toml++, spdlog or libarchive are needed on this machine),
# GPU_CHECK_DIR (work directory, default a new /tmp/gpu-check.XXXXXX), GPU_CHECK_TIMEOUT
# (seconds each group of ranks may run, default 300).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
fixtures=$root/tests/unit/data/step_env
work=${GPU_CHECK_DIR:-$(mktemp -d /tmp/gpu-check.XXXXXX)}
limit=${GPU_CHECK_TIMEOUT:-300}
mkdir -p "$work"

summary=()
passed=0 failed=0 skipped=0
record() { # STATUS TEXT [DETAIL...]
  local status=$1 text=$2
  shift 2
  summary+=("$(printf '%-8s %s' "$status" "$text")")
  case $status in
    PASS) passed=$((passed + 1)) ;;
    FAILED) failed=$((failed + 1)) ;;
    SKIPPED) skipped=$((skipped + 1)) ;;
  esac
  printf '%-8s %s\n' "$status" "$text"
  local line
  for line in "$@"; do printf '         %s\n' "$line"; done
}
note() { printf 'gpu-check: %s\n' "$*"; }

# --- this machine's PyTorch -------------------------------------------------------------------
if [ -z "${PYTHON:-}" ]; then
  for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null && "$p" -c 'import torch' 2>/dev/null; then
      PYTHON=$(command -v "$p")
      break
    fi
  done
fi
if [ -z "${PYTHON:-}" ] || ! "$PYTHON" -c 'import torch' 2>/dev/null; then
  echo "gpu-check: no python3 here imports torch (set PYTHON=/path/to/python3)" >&2
  exit 1
fi
read -r torch_version torch_major gpus nccl_ok gloo_ok nccl_version < <("$PYTHON" - <<'PY'
import torch, torch.distributed as dist
gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
try:
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if gpus else "n/a"
except Exception:
    nccl = "n/a"
print(torch.__version__, torch.__version__.split(".")[0], gpus, int(dist.is_nccl_available()),
      int(dist.is_gloo_available()), nccl)
PY
)
prefix=$("$PYTHON" -c 'import torch; print(torch.utils.cmake_prefix_path)')
note "PyTorch $torch_version ($PYTHON), GPUs visible: $gpus, NCCL $nccl_version, work directory $work"

# Debian's torchrun 1.13 on Python 3.11 crashes with its default --redirects 0 --tee 0.
torchrun_fix=()
[ "$torch_major" -lt 2 ] && torchrun_fix=(--redirects 2 --tee 1)
gpu_ids=()
if [ "$gpus" -gt 0 ]; then
  if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then
    IFS=, read -r -a gpu_ids <<<"$CUDA_VISIBLE_DEVICES"
  else
    mapfile -t gpu_ids < <(seq 0 $((gpus - 1)))
  fi
fi

# --- running ranks -----------------------------------------------------------------------------
# Every rank starts from a clean environment: only these, plus what each run sets, reach it.
base_env=(PATH="$PATH" HOME="${HOME:-/}" LANG=C.UTF-8)
for v in LD_LIBRARY_PATH PYTHONPATH VIRTUAL_ENV CONDA_PREFIX CUDA_VISIBLE_DEVICES; do
  [ -n "${!v:-}" ] && base_env+=("$v=${!v}")
done
while IFS='=' read -r name _; do base_env+=("$name=${!name}"); done < <(env | grep -E '^NCCL_[A-Z0-9_]+=')

pids=()
declare -A log_of=()
launch() { # LOG [--env-file FILE] [VAR=VALUE...] -- COMMAND...
  local log=$1 file=
  shift
  if [ "$1" = --env-file ]; then file=$2; shift 2; fi
  local vars=()
  while [ "$1" != -- ]; do vars+=("$1"); shift; done
  shift
  if [ -n "$file" ]; then
    timeout -k 10 "$limit" env -i "${base_env[@]}" "${vars[@]}" bash -c '. "$0" && exec "$@"' "$file" "$@" >"$log" 2>&1 &
  else
    timeout -k 10 "$limit" env -i "${base_env[@]}" "${vars[@]}" "$@" >"$log" 2>&1 &
  fi
  pids+=($!)
  log_of[$!]=$log
}

# Waits for every launched rank; once one fails, stops the others (they would wait for it until
# the timeout). Sets `exit_failures` to the ranks that did not exit 0, `first_failure` to the log
# of the first one.
exit_failures=0 first_failure=
wait_ranks() {
  local -A left=()
  local pid rc
  for pid in "${pids[@]}"; do left[$pid]=1; done
  exit_failures=0 first_failure=
  while [ ${#left[@]} -gt 0 ]; do
    wait -n -p pid "${!left[@]}"
    rc=$?
    unset "left[$pid]"
    if [ "$rc" -ne 0 ]; then
      if [ "$exit_failures" -eq 0 ]; then
        first_failure="${log_of[$pid]} (exit $rc)"
        [ "$rc" -eq 124 ] && first_failure="${log_of[$pid]} (timed out after ${limit}s)"
      fi
      exit_failures=$((exit_failures + 1))
      for p in "${!left[@]}"; do kill "$p" 2>/dev/null; done
    fi
  done
  pids=()
}

# verify NAME LOG REGEX [LOG REGEX...]: PASS when every rank exited 0 and each LOG has a line
# matching its REGEX; otherwise FAILED with the first miss and the end of that log.
verify() {
  local name=$1
  shift
  if [ "$exit_failures" -ne 0 ]; then
    local tail_lines
    mapfile -t tail_lines < <(tail -n 5 "${first_failure% (*}")
    record FAILED "$name" "$exit_failures process(es) failed (the others are stopped then); first: $first_failure" "${tail_lines[@]}"
    return
  fi
  while [ $# -gt 0 ]; do
    if ! grep -Eq -- "$2" "$1"; then
      local tail_lines
      mapfile -t tail_lines < <(tail -n 5 "$1")
      record FAILED "$name" "$1 has no line matching: $2" "${tail_lines[@]}"
      return
    fi
    shift 2
  done
  record PASS "$name"
}

free_port() { "$PYTHON" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# --- 1. build examples/ddp_train against this PyTorch's LibTorch ------------------------------
build=$work/ddp_train-build
cmake_path=$PATH
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  cmake_path=/usr/local/cuda/bin:$PATH # a CUDA LibTorch's TorchConfig looks for the toolkit
fi
have_gloo=NO have_nccl=NO ddp_train=
if PATH=$cmake_path cmake -S "$root/examples/ddp_train" -B "$build" -DCMAKE_PREFIX_PATH="$prefix" >"$work/cmake.log" 2>&1 &&
  cmake --build "$build" -j"$(nproc)" >>"$work/cmake.log" 2>&1 && [ -x "$build/ddp_train" ]; then
  ddp_train=$build/ddp_train
  found=$(grep -Eo 'LibTorch .* \(gloo (YES|NO), nccl (YES|NO)\)' "$work/cmake.log" | tail -n 1)
  [[ $found == *"gloo YES"* ]] && have_gloo=YES
  [[ $found == *"nccl YES"* ]] && have_nccl=YES
  record PASS "build examples/ddp_train (CMAKE_PREFIX_PATH=$prefix): $found"
else
  mapfile -t tail_lines < <(grep -v '^--' "$work/cmake.log" | tail -n 8)
  record FAILED "build examples/ddp_train (CMAKE_PREFIX_PATH=$prefix), log $work/cmake.log" "${tail_lines[@]}" \
    "(a CUDA LibTorch's TorchConfig needs the CUDA toolkit: nvcc on PATH or CUDAToolkit_ROOT)"
fi

# Runs WORLD ranks of COMMAND here as one node (RANK = LOCAL_RANK = r, MASTER_ADDR 127.0.0.1), logs
# in DIR/rankR.log, and waits for them. With `bound`, each rank sees only its own GPU, as under
# Slurm's --gpus-per-task=1. Fills `expect` with DIR/rankR.log and TEMPLATE, {r} and {w} replaced.
run_local() { # DIR WORLD all|bound TEMPLATE COMMAND...
  local dir=$1 world=$2 gpus_seen=$3 template=$4 r port
  shift 4
  mkdir -p "$dir"
  port=$(free_port)
  expect=()
  for ((r = 0; r < world; r++)); do
    local bind=()
    [ "$gpus_seen" = bound ] && bind=(CUDA_VISIBLE_DEVICES="${gpu_ids[r]}")
    launch "$dir/rank$r.log" "${bind[@]}" RANK=$r LOCAL_RANK=$r WORLD_SIZE=$world LOCAL_WORLD_SIZE=$world \
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port -- "$@"
    local line=${template//\{r\}/$r}
    expect+=("$dir/rank$r.log" "${line//\{w\}/$world}")
  done
  wait_ranks
}

# --- 2. ddp_train over NCCL: one rank per visible GPU -----------------------------------------
trained='^rank {r}/{w} local_rank {r} device'
if [ "$gpus" -eq 0 ]; then
  record SKIPPED "ddp_train over NCCL: no GPU"
elif [ -z "$ddp_train" ]; then
  record FAILED "ddp_train over NCCL: ddp_train was not built"
elif [ "$have_nccl" != YES ]; then
  record FAILED "ddp_train over NCCL: built without NCCL (ProcessGroupNCCL.hpp or nccl.h not found, see $work/cmake.log; NCCL_ROOT=... helps)"
else
  dir=$work/ddp_train-nccl
  run_local "$dir" "$gpus" all "$trained cuda:{r}: .* identical on all ranks: yes\$" "$ddp_train" --steps 50
  verify "ddp_train over NCCL (chosen automatically), $gpus rank(s), device cuda:LOCAL_RANK" \
    "$dir/rank0.log" '^ddp_train: backend nccl, device cuda:0, NCCL [0-9]' "${expect[@]}"
  if [ "$gpus" -ge 2 ]; then
    run_local "$work/ddp_train-nccl-bound" "$gpus" bound "$trained cuda:0: .* identical on all ranks: yes\$" \
      "$ddp_train" --steps 50
    verify "ddp_train over NCCL, one GPU bound per rank (CUDA_VISIBLE_DEVICES), device cuda:0" "${expect[@]}"
  fi
fi

# --- 3. ddp_train over Gloo: 2 ranks on the CPU -----------------------------------------------
if [ -z "$ddp_train" ]; then
  record FAILED "ddp_train over Gloo: ddp_train was not built"
elif [ "$have_gloo" != YES ]; then
  record SKIPPED "ddp_train over Gloo: this LibTorch ships no gloo headers, so ddp_train has no Gloo (allreduce.py checks Gloo below)"
else
  dir=$work/ddp_train-gloo
  run_local "$dir" 2 all "$trained cpu: .* identical on all ranks: yes\$" "$ddp_train" --steps 50 --backend gloo
  verify "ddp_train over Gloo, 2 ranks on the CPU" "$dir/rank0.log" '^ddp_train: backend gloo, device cpu, NCCL ' "${expect[@]}"
fi

# --- 4. allreduce.py over NCCL and over Gloo --------------------------------------------------
allreduce=$root/examples/ddp_python/allreduce.py
if [ "$gpus" -eq 0 ]; then
  record SKIPPED "allreduce.py over NCCL: no GPU"
elif [ "$nccl_ok" -ne 1 ]; then
  record FAILED "allreduce.py over NCCL: this PyTorch has no NCCL"
else
  run_local "$work/python-nccl" "$gpus" all '^rank={r} world={w} .* ok=True backend=nccl device=cuda:{r}$' "$PYTHON" "$allreduce"
  verify "allreduce.py over NCCL (chosen automatically), $gpus rank(s)" "${expect[@]}"
fi
run_local "$work/python-gloo" 2 all '^rank={r} world={w} .* sum=3 ok=True backend=gloo device=cpu$' "$PYTHON" "$allreduce" --backend gloo
verify "allreduce.py over Gloo, 2 ranks on the CPU" "${expect[@]}"

# --- 5. replay the recorded srun environments -------------------------------------------------
replay=${STAGEHAND_DDP_REPLAY:-}
if [ -z "$replay" ]; then
  replay=$work/stagehand-ddp-replay
  if ! c++ -std=c++20 -O1 -I"$root/src" -o "$replay" "$root/bench/ddp_replay.cpp" \
    "$root"/src/stagehand/ddp/*.cpp "$root"/src/stagehand/util/*.cpp -pthread >"$work/replay-build.log" 2>&1; then
    replay=
    record FAILED "build stagehand-ddp-replay (log $work/replay-build.log; or set STAGEHAND_DDP_REPLAY to a built one)"
  fi
fi
fixture() { sed -n "s/^$2=//p" "$1"; } # FILE NAME: a recorded SLURM_* value

# Writes the replayed exports of one recorded step into DIR/rankN.env, with MASTER_ADDR, torchrun's
# endpoint and its local address (PyTorch 2.x advertises its rendezvous store there) pointed at
# 127.0.0.1: the recorded node names resolve only on the cluster.
replay_step() { # LAYOUT DIR
  local layout=$1 dir=$2
  mkdir -p "$dir"
  "$replay" "$fixtures" "$layout" >"$dir/exports.sh" 2>"$dir/replay.err" || return 1
  awk -v dir="$dir" '/^# rank /{ f = dir "/rank" $3 ".env" } /^export /{ print > f }' "$dir/exports.sh"
  sed -i -E -e "s/^export (MASTER_ADDR|PET_MASTER_ADDR)=.*/export \\1='127.0.0.1'/" \
    -e "s/^export PET_LOCAL_ADDR=.*/export PET_LOCAL_ADDR='127.0.0.1'/" \
    -e "s/^export PET_RDZV_ENDPOINT='[^:']*:/export PET_RDZV_ENDPOINT='127.0.0.1:/" "$dir"/rank*.env
}

if [ -n "$replay" ]; then
  note "replaying $fixtures with $replay; MASTER_ADDR, PET_LOCAL_ADDR and PET_RDZV_ENDPOINT's host become 127.0.0.1 (node names do not resolve here)"
  for layout in n3-block n4-cyclic n5-uneven het-reversed nested-inner; do
    dir=$work/replay-$layout
    if ! replay_step "$layout" "$dir"; then
      record FAILED "replay $layout: stagehand-ddp-replay failed: $(head -n 1 "$dir/replay.err")"
      continue
    fi
    world=$(fixture "$fixtures/$layout.rank0.env" SLURM_STEP_NUM_TASKS)
    note "replay $layout: $(grep -c '^# rank' "$dir/exports.sh") ranks, $(grep -m1 -o "MASTER_PORT='[0-9]*'" "$dir/exports.sh"), exports in $dir/exports.sh"
    for backend in gloo nccl; do
      if [ "$backend" = nccl ] && [ "$gpus" -eq 0 ]; then
        record SKIPPED "replay $layout over NCCL: no GPU"
        continue
      fi
      if [ "$backend" = nccl ] && [ "$gpus" -lt "$world" ]; then
        record SKIPPED "replay $layout over NCCL: one GPU per rank needs $world GPUs, $gpus visible (the Gloo replay covers the environment)"
        continue
      fi
      expect=()
      for ((r = 0; r < world; r++)); do
        f=$fixtures/$layout.rank$r.env
        procid=$(fixture "$f" SLURM_PROCID) localid=$(fixture "$f" SLURM_LOCALID)
        bind=() device=cpu
        # One GPU bound per task, as Slurm's --gpus-per-task=1 does: the task's GPU is device 0.
        [ "$backend" = nccl ] && bind=(CUDA_VISIBLE_DEVICES="${gpu_ids[r]}") device=cuda:0
        launch "$dir/$backend.rank$r.log" --env-file "$dir/rank$r.env" "${bind[@]}" -- "$PYTHON" "$allreduce" --backend "$backend"
        expect+=("$dir/$backend.rank$r.log" "^rank=$procid world=$world local_rank=$localid .* sum=$((world * (world + 1) / 2)) ok=True backend=$backend device=$device$")
      done
      wait_ranks
      verify "replay $layout over $([ "$backend" = nccl ] && echo NCCL || echo Gloo): $world ranks, RANK/LOCAL_RANK/WORLD_SIZE as Slurm placed them" "${expect[@]}"
    done
  done

  # One task per node: torchrun per recorded node, configured only by the replayed PET_*.
  dir=$work/replay-pernode
  if ! replay_step pernode "$dir"; then
    record FAILED "replay pernode: stagehand-ddp-replay failed: $(head -n 1 "$dir/replay.err")"
  else
    nodes=$(fixture "$fixtures/pernode.rank0.env" SLURM_STEP_NUM_TASKS)
    for nproc in from-env 2; do
      nproc_arg=() per_node=$(sed -n "s/^export PET_NPROC_PER_NODE='\(.*\)'/\1/p" "$dir/rank0.env")
      [ "$nproc" = 2 ] && nproc_arg=(--nproc_per_node=2) per_node=2
      world=$((nodes * per_node))
      for ((n = 0; n < nodes; n++)); do
        launch "$dir/torchrun-$nproc.node$n.log" --env-file "$dir/rank$n.env" -- \
          "$PYTHON" -m torch.distributed.run "${nproc_arg[@]}" "${torchrun_fix[@]}" "$allreduce" --backend gloo
      done
      wait_ranks
      cat "$dir"/torchrun-$nproc.node*.log >"$dir/torchrun-$nproc.all.log"
      expect=()
      for ((r = 0; r < world; r++)); do
        expect+=("$dir/torchrun-$nproc.all.log" "rank=$r world=$world .* sum=$((world * (world + 1) / 2)) ok=True backend=gloo")
      done
      label="PET_NPROC_PER_NODE=$per_node"
      [ "$nproc" = 2 ] && label="--nproc_per_node=2"
      verify "replay pernode: torchrun on $nodes nodes x $per_node ($label), world $world, no rendezvous arguments" "${expect[@]}"
    done
  fi
fi

# --- summary -----------------------------------------------------------------------------------
echo
echo "gpu-check summary (PyTorch $torch_version, $gpus GPU(s); logs in $work):"
printf '  %s\n' "${summary[@]}"
echo "gpu-check: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
