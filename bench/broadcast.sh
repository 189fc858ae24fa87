#!/usr/bin/env bash
# Read-once fan-out: a 256 MiB archive staged from a shared filesystem with one bandwidth budget
# for all readers (sharedfs --mbps), on the test cluster with node-local tmpfs per node
# (cluster.sh node-restart NODE private) and no node daemon. Each round, inside one allocation of
# both nodes, interleaved:
#   tar      srun -N1 tar -xf SRC                       (GNU tar on one node, the baseline)
#   one      srun -N1 --stage-data=SRC true             (one node reads)
#   two      srun -N2 --stage-data=SRC true             (node 0 reads once, sbcast delivers)
#   never    srun -N2 --stage-data=SRC true  with [stage] broadcast = "never" (both nodes read)
# and prints medians, bytes read from the share per step, and two/one (target <= 1.2).
# Usage (root): bench/broadcast.sh BUILD_DIR [ROUNDS] [MBPS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: broadcast.sh BUILD_DIR [ROUNDS] [MBPS]}" && pwd)
rounds=${2:-3}
mbps=${3:-100}
source "$here/lib.sh"

sharedfs=${STAGEHAND_SHAREDFS:-$here/../tests/tools/sharedfs.py}
[ -f "$sharedfs" ] || { echo "no sharedfs.py at $sharedfs (set STAGEHAND_SHAREDFS)" >&2; exit 1; }
bench_cluster_start "$build" bcast
cleanup() {
  "$cluster" stop
  fusermount -u "$W/shared" 2>/dev/null || umount -l "$W/shared" 2>/dev/null || true
  rm -rf "$W/src" "$W/shared" "$W/bench"
}
trap cleanup EXIT

mkdir -p "$W/src/ds" "$W/shared" "$W/bench"
for i in $(seq 1 8); do head -c 32M /dev/urandom >"$W/src/ds/part$i.bin"; done
tar -C "$W/src" -cf "$W/src/big.tar" ds && rm -rf "$W/src/ds"
chown -R "$STAGEHAND_TEST_USER:" "$W/src" "$W/shared" "$W/bench"
setsid /usr/bin/python3 "$sharedfs" "$W/src" "$W/shared" --mbps "$mbps" >"$STAGEHAND_CLUSTER_DIR/log/sharedfs.log" 2>&1 &
for _ in $(seq 1 50); do [ -e "$W/shared/.sharedfs-stats" ] && break; sleep 0.1; done
for n in node1 node2; do "$cluster" daemon-stop "$n"; "$cluster" node-restart "$n" private; done
config() {
  cat >"$STAGEHAND_TEST_CONFIG" <<TOML
[tmpdir]
base = "$STAGEHAND_SCRATCH/local"
keep_for = "1h"
[stage]
broadcast = "$1"
progress_interval = "0"
$(cat "$STAGEHAND_DAEMON_TOML")
TOML
}
results=$W/bench/times
: >"$results"
bytes() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['bytes_read'])" "$W/shared/.sharedfs-stats"; }
# One job per step (allocation, prolog and epilog included alike for every kind).
t() { # name broadcast-mode srun-args...
  local name=$1 mode=$2 b0 t0 t1
  shift 2
  config "$mode"
  b0=$(bytes)
  t0=$(date +%s%N)
  runuser -u "$STAGEHAND_TEST_USER" -- env SLURM_CONF="$SLURM_CONF" PATH="$PATH" bash -c "cd '$W' && srun --ntasks-per-node=1 $*" >/dev/null
  t1=$(date +%s%N)
  echo "$name $(((t1 - t0) / 1000)) $(($(bytes) - b0))" >>"$results"
}
for i in $(seq 1 "$rounds"); do
  t tar auto "-N1 --tmpdir bash -c 'mkdir \$SLURM_TMPDIR/t && tar -xf shared/big.tar -C \$SLURM_TMPDIR/t'"
  t one auto "-N1 --stage-data=shared/big.tar:d true"
  t two auto "-N2 --stage-data=shared/big.tar:d true"
  t never never "-N2 --stage-data=shared/big.tar:d true"
done

python3 - "$results" "$rounds" "$mbps" "$(stat -c %s "$W/src/big.tar")" <<'PY'
import statistics, sys
times, reads = {}, {}
for line in open(sys.argv[1]):
    name, us, b = line.split()
    times.setdefault(name, []).append(int(us) / 1e6)
    reads.setdefault(name, []).append(int(b))
size = int(sys.argv[4])
m = {k: statistics.median(v) for k, v in times.items()}
print(f"read-once fan-out: 256 MiB tar from sharedfs at {sys.argv[3]} MB/s shared by all readers, "
      f"{sys.argv[2]} rounds interleaved, one job each (median seconds, bytes read / archive size):")
for k, label in (("tar", "GNU tar -xf on 1 node"), ("one", "--stage-data, 1 node"),
                 ("two", "--stage-data, 2 nodes (sbcast)"), ("never", "--stage-data, 2 nodes, broadcast=never")):
    print(f"  {label:40s} {m[k]:7.2f} s   read {statistics.median(reads[k]) / size:5.2f}x")
print(f"  2 nodes / 1 node                 = {m['two'] / m['one']:.2f}   (target <= 1.2)")
print(f"  2 nodes never / 1 node           = {m['never'] / m['one']:.2f}")
print(f"  1 node / GNU tar                 = {m['one'] / m['tar']:.2f}")
PY
