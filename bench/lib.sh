# Shared by the staging benchmarks (sourced): the 60,000-file test tree, timing, medians.

declare -gA BENCH_TIMES=()

# bench_small_tree DIR [FILES]: FILES (default 60,000) files of 2 KiB under DIR, 1,000 per directory.
bench_small_tree() {
  python3 - "$1" "${2:-60000}" <<'PY'
import os, sys
root = sys.argv[1]
data = os.urandom(2048)
for d in range(int(sys.argv[2]) // 1000):
    os.makedirs(f"{root}/d{d:02d}")
    for i in range(1000):
        with open(f"{root}/d{d:02d}/f{i:04d}", "wb") as f:
            f.write(data[i % 7:] + data[: i % 7])
PY
}

# bench_time KEY COMMAND...: runs the command and records its wall time under KEY.
bench_time() {
  local key=$1 t0 t1
  shift
  t0=$(date +%s%N)
  "$@"
  t1=$(date +%s%N)
  BENCH_TIMES[$key]+="$(((t1 - t0) / 1000)) "
}

# bench_unpack KEY ARCHIVE COMMAND [TREE]: COMMAND ($A the archive, $D the destination, $T the
# caller's $tool) into a fresh, empty $work/out, its wall time recorded under KEY; with TREE, exits
# unless what it unpacked is the same tree.
bench_unpack() {
  local key=$1 cmd=$3 tree=${4:-}
  rm -rf "$work/out" && mkdir "$work/out"
  bench_time "$key" env A="$2" D="$work/out" T="$tool" bash -c "$cmd"
  if [ -n "$tree" ] && ! diff -rq "$tree" "$work/out" >/dev/null; then
    echo "$(basename "$0"): $key produced a different tree" >&2
    exit 1
  fi
}

# bench_median KEY: the median of KEY's times, in seconds.
bench_median() {
  printf '%s\n' ${BENCH_TIMES[$1]} | sort -n |
    awk '{ v[NR] = $1 } END { m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.3f", m / 1e6 }'
}

# bench_ratio A B: A / B with two decimals.
bench_ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

# bench_cluster_start BUILD_DIR NAME: starts a test cluster of the benchmark's own (root), in
# /dev/shm/stagehand-bench-NAME unless STAGEHAND_BENCH_DIR says otherwise (STAGEHAND_BENCH_PORT,
# STAGEHAND_BENCH_USER likewise); sets `cluster` (its control script), W (its work directory) and
# the cluster's environment. The caller stops it (trap '"$cluster" stop' EXIT).
bench_cluster_start() {
  export STAGEHAND_CLUSTER_DIR=${STAGEHAND_BENCH_DIR:-/dev/shm/stagehand-bench-$2}
  export STAGEHAND_CLUSTER_PORT=${STAGEHAND_BENCH_PORT:-47917}
  export STAGEHAND_TEST_USER=${STAGEHAND_BENCH_USER:-stagehand-test}
  cluster=$(cd "$(dirname "${BASH_SOURCE[0]}")/../tests/cluster" && pwd)/cluster.sh
  "$cluster" start "$1/plugin/stagehand.so"
  eval "$("$cluster" env)"
  W=$STAGEHAND_CLUSTER_DIR/work
}
