#!/usr/bin/env bash
# The node cache: how much of a cold staging a warm one (a cache hit) still costs, on a real
# cluster with stagehandd, on tmpfs. Each round runs, inside one allocation on node1:
#   base  srun --tmpdir true                              (the job with --tmpdir only)
#   cold  srun --stage-data=<fresh copy of SRC> true      (a miss: filled, then linked)
#   warm  srun --stage-data=SRC true                       (a hit: linked only)
# and prints medians and (warm - base) / (cold - base) for a 60,000-file tar (target <= 0.5) and
# a directory of 16 x 64 MiB shards (target <= 0.05).
# Usage (root): bench/cache.sh BUILD_DIR [ROUNDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: cache.sh BUILD_DIR [ROUNDS]}" && pwd)
rounds=${2:-5}
source "$here/lib.sh"

bench_cluster_start "$build" cache
trap '"$cluster" stop; rm -rf "$W/bench"' EXIT
sed -i 's/^cache_max_bytes = .*/cache_max_bytes = "8G"/' "$STAGEHAND_TEST_CONFIG" "$STAGEHAND_DAEMON_TOML"
"$cluster" daemon-stop node1 && "$cluster" daemon-start node1

mkdir -p "$W/bench/shards"
bench_small_tree "$W/bench/tree"
tar -C "$W/bench/tree" -cf "$W/bench/many.tar" .
rm -rf "$W/bench/tree"
for i in $(seq -w 1 16); do head -c 64M /dev/urandom >"$W/bench/shards/shard-$i.bin"; done
chown -R "$STAGEHAND_TEST_USER:" "$W/bench"
results=$W/bench/times
: >"$results"; chmod 0666 "$results"

runuser -u "$STAGEHAND_TEST_USER" -- env SLURM_CONF="$SLURM_CONF" PATH="$PATH" bash -c "cd '$W/bench' && salloc -N1 -n1 -w node1 --quiet bash -c '
  set -e
  t() { # name srun-args...
    local name=\$1; shift
    local t0=\$(date +%s%N)
    srun -N1 -n1 \"\$@\" true
    local t1=\$(date +%s%N)
    echo \"\$name \$(( (t1 - t0) / 1000 ))\" >> $results
  }
  # Warm the cache once for the sources the warm runs use (settled first: a source modified within
  # 2 s of its staging is not cached, the daemon's racy-source rule).
  sleep 3
  srun --stage-data=many.tar:warm0,shards:warmshards0 true >/dev/null
  sleep 5 # (the entry of a miss is made after its job has the data: let it land)
  for i in \$(seq 1 $rounds); do
    cp many.tar cold\$i.tar; cp -r shards coldshards\$i
    t base --tmpdir
    t tar-cold --stage-data=cold\$i.tar:c\$i
    t tar-warm --stage-data=many.tar:w\$i
    t shards-cold --stage-data=coldshards\$i:cs\$i
    t shards-warm --stage-data=shards:ws\$i
    srun -N1 -n1 bash -c \"rm -rf \\\$SLURM_TMPDIR/c\$i \\\$SLURM_TMPDIR/w\$i \\\$SLURM_TMPDIR/cs\$i \\\$SLURM_TMPDIR/ws\$i\"
    rm -rf cold\$i.tar coldshards\$i
  done
'"

python3 - "$results" "$rounds" <<'PY'
import statistics, sys
times = {}
for line in open(sys.argv[1]):
    name, us = line.split()
    times.setdefault(name, []).append(int(us) / 1e6)
m = {k: statistics.median(v) for k, v in times.items()}
print(f"node cache, {sys.argv[2]} rounds interleaved on tmpfs (median seconds of one srun step):")
for k in ("base", "tar-cold", "tar-warm", "shards-cold", "shards-warm"):
    print(f"  {k:12s} {m[k]:7.3f}")
for what, target in (("tar", 0.5), ("shards", 0.05)):
    r = (m[f"{what}-warm"] - m["base"]) / (m[f"{what}-cold"] - m["base"])
    label = "60,000-file tar" if what == "tar" else "16 x 64 MiB shards"
    print(f"  {label:20s} (warm - base) / (cold - base) = {r:.3f}   (target <= {target})")
PY
