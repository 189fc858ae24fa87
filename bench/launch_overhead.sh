#!/usr/bin/env bash
# Step launch overhead of stagehand: `srun -N2 -n2 true` with an empty plugstack.conf, with the
# plugin loaded, with --tmpdir and with --ddp-env, interleaved inside one allocation (slurmstepd
# and srun re-read plugstack.conf at every step). Prints medians and ratios. Targets: <= 1.02 with
# the plugin and no option, <= 1.05 with an option.
# Usage (root): bench/launch_overhead.sh BUILD_DIR [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: launch_overhead.sh BUILD_DIR [ROUNDS]}" && pwd)
rounds=${2:-30}

export STAGEHAND_CLUSTER_DIR=${STAGEHAND_BENCH_DIR:-/tmp/stagehand-bench}
export STAGEHAND_CLUSTER_PORT=${STAGEHAND_BENCH_PORT:-47817}
cluster=$here/../tests/cluster/cluster.sh
"$cluster" start "$build/plugin/stagehand.so"
trap '"$cluster" stop' EXIT
eval "$("$cluster" env)"

plugstack=$STAGEHAND_CLUSTER_DIR/etc/plugstack.conf
cp "$plugstack" "$plugstack.with-plugin"
: >"$plugstack.empty"
# Slurm's own cost of any plugin: a SPANK plugin that does nothing.
cc -shared -fPIC -O2 -o "$STAGEHAND_CLUSTER_DIR/lib/noop.so" "$here/noop_plugin.c"
echo "required $STAGEHAND_CLUSTER_DIR/lib/noop.so" >"$plugstack.noop"
results=$STAGEHAND_CLUSTER_DIR/bench-times
: >"$results"

# The allocation's own script runs as root (it rewrites plugstack.conf between steps).
salloc -N2 -n2 --quiet bash -c '
  set -e
  one() { # srun-args... (mode_file, mode_name from the caller)
    cp "'"$plugstack"'.$mode_file" "'"$plugstack"'"
    local t0=$(date +%s%N)
    srun "$@" true
    local t1=$(date +%s%N)
    echo "$mode_name $(( (t1 - t0) / 1000 ))" >> "'"$results"'"
  }
  for i in $(seq 1 '"$rounds"'); do
    mode_file=empty mode_name=empty one -N2 -n2
    mode_file=noop mode_name=noop-plugin one -N2 -n2
    mode_file=with-plugin mode_name=plugin one -N2 -n2
    mode_file=with-plugin mode_name=plugin+tmpdir one -N2 -n2 --tmpdir
    mode_file=with-plugin mode_name=plugin+ddp-env one -N2 -n2 --ddp-env
  done
  cp "'"$plugstack"'.with-plugin" "'"$plugstack"'"
'

python3 - "$results" "$rounds" <<'PY'
import statistics, sys
times = {}
for line in open(sys.argv[1]):
    mode, us = line.split()
    times.setdefault(mode, []).append(int(us) / 1000.0)
base = statistics.median(times["empty"])
print(f"srun -N2 -n2 true, {sys.argv[2]} rounds interleaved (median ms):")
for mode in ("empty", "noop-plugin", "plugin", "plugin+tmpdir", "plugin+ddp-env"):
    m = statistics.median(times[mode])
    # The plugin loaded and no option asked for: <= 1.02 (issue 11); an option's own work: <= 1.05.
    target = {"plugin": "   (target <= 1.02)", "plugin+tmpdir": "   (target <= 1.05)", "plugin+ddp-env": "   (target <= 1.05)"}
    print(f"  {mode:14s} {m:8.1f} ms   ratio {m / base:5.3f}{target.get(mode, '')}")
PY
