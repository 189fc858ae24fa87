#!/usr/bin/env bash
# device-check: everything a lent GPU machine (many cores, a GPU, no Slurm, no network) is for, in
# one run: the GPU check (scripts/gpu-check.sh: LibTorch and NCCL with the machine's own PyTorch),
# then the test cluster carried there (bench/carry.sh --run: staging without the daemon, and the
# daemon's miss and crowds, which a 2-core machine binds). Prepare it here first, in the tree so
# that it travels with the working copy:
#   bench/carry.sh BUILD_DIR carried            (here, as root)
#   bash scripts/device-check.sh carried        (there, as root; prints both, exits 1 on a failure)
# GPU_CHECK_TIMEOUT, STAGEHAND_CARRY_BENCHES and STAGEHAND_CARRY_DAEMON_ROUNDS as those scripts
# take them; DEVICE_CHECK_ROUNDS (default 5) the no-daemon staging's rounds.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
carried=${1:?usage: device-check.sh CARRIED_DIR (made by bench/carry.sh BUILD_DIR CARRIED_DIR)}
failed=0
echo "== device-check: $(nproc) cores, $(nvidia-smi -L 2>/dev/null | head -n1 || echo "no nvidia-smi")"
echo "== gpu-check"
bash "$root/scripts/gpu-check.sh" || failed=1
echo "== carry.sh --run"
bash "$root/bench/carry.sh" --run "$carried" "${DEVICE_CHECK_ROUNDS:-5}" || failed=1
echo "== device-check: $([ "$failed" = 0 ] && echo "every part ran" || echo "a part FAILED (above)")"
exit "$failed"
