#!/usr/bin/env bash
# Cold staging end to end, as a user compares it: one srun step that stages a 60,000-file tar
# with --stage-data against the same step running `tar -xf` itself, on the test cluster, on
# tmpfs. Each round, inside one allocation (of node1; of both nodes with NODES=2), interleaved:
#   tar     srun --tmpdir bash -c 'mkdir $SLURM_TMPDIR/tN && tar -xf many.tar -C $SLURM_TMPDIR/tN'
#   stage   srun --stage-data=coldN.tar:sN true        (a fresh copy: always a cold staging)
# (tar first in odd rounds, stage first in even ones; every step starts from an empty job directory,
# after a 2 s pause; the trees are compared once, untimed, before the rounds)
# once without the node daemon (in-process staging) and once with it (a cache miss: filled, then
# linked; and a cache hit: many.tar itself, staged once before the rounds), and prints the medians
# and stage / tar (target <= 0.6 for cold staging without the daemon; with it, a miss also fills
# the node's cache for the next job). An empty step (srun --tmpdir true) is timed too: what every
# step costs anyway.
# With NODES=2 every step runs on both test nodes (one task each, each node staging for itself:
# the test nodes share one host's cores, so this shows the ratio when the cores are contended,
# not a second machine's speed).
# Usage (root): bench/stage_e2e.sh BUILD_DIR [ROUNDS] [FILES] [NODES]   (ROUNDS: 10; FILES: 60000 or 600000)
#   STAGEHAND_BENCH_PHASES="no-daemon daemon" (the default) picks the phases.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: stage_e2e.sh BUILD_DIR [ROUNDS] [FILES] [NODES]}" && pwd)
rounds=${2:-10}
files=${3:-60000}
nodes=${4:-1}
case $nodes in
  1) nodelist=node1 ;;
  2) nodelist=node1,node2 ;;
  *) echo "stage_e2e.sh: NODES is 1 or 2" >&2; exit 2 ;;
esac
source "$here/lib.sh"

bench_cluster_start "$build" e2e
trap '"$cluster" stop; rm -rf "$W/bench"' EXIT
sed -i 's/^cache_max_bytes = .*/cache_max_bytes = "8G"/' "$STAGEHAND_TEST_CONFIG" "$STAGEHAND_DAEMON_TOML"
sed -i 's/^progress_interval = .*/progress_interval = "0"/' "$STAGEHAND_TEST_CONFIG"

mkdir -p "$W/bench"
bench_small_tree "$W/bench/tree" "$files"
tar -C "$W/bench/tree" -cf "$W/bench/many.tar" .
rm -rf "$W/bench/tree"
chown -R "$STAGEHAND_TEST_USER:" "$W/bench"
results=$W/bench/times
: >"$results"
chmod 0666 "$results"

# phase NAME: ROUNDS interleaved rounds of base, tar and stage in one allocation of NODES nodes.
# Every timed step starts from an empty job directory: what one step leaves in tmpfs slowed the
# next step's file creation by up to half here, so whichever went second in a round paid for the
# first. The order still alternates. (No single quotes inside the script below: it is one.)
phase() {
  runuser -u "$STAGEHAND_TEST_USER" -- env SLURM_CONF="$SLURM_CONF" PATH="$PATH" bash -c "cd '$W/bench' && salloc -N$nodes -n$nodes -w $nodelist --quiet bash -c '
    set -e
    t() { # name srun-args...
      local name=\$1; shift
      local t0=\$(date +%s%N)
      srun -N$nodes -n$nodes \"\$@\" >/dev/null
      local t1=\$(date +%s%N)
      echo \"$1-\$name \$(( (t1 - t0) / 1000 ))\" >> $results
    }
    # Untimed: both ways once, and the trees must match.
    cp many.tar cold0.tar
    srun -N$nodes -n$nodes --tmpdir bash -c \"mkdir \\\$SLURM_TMPDIR/t0 && tar -xf many.tar -C \\\$SLURM_TMPDIR/t0\" >/dev/null
    srun -N$nodes -n$nodes --stage-data=cold0.tar:s0 true >/dev/null
    srun -N$nodes -n$nodes --tmpdir bash -c \"diff -r \\\$SLURM_TMPDIR/t0 \\\$SLURM_TMPDIR/s0\" || { echo stage_e2e.sh: different trees >&2; exit 1; }
    rm -f cold0.tar
    # With the daemon: many.tar staged once first, so every warm step below is a cache hit.
    [ $1 != daemon ] || srun -N$nodes -n$nodes --stage-data=many.tar:w0 true >/dev/null
    [ $1 != daemon ] || sleep 5 # (the entry of a miss is made after its job has the data: let it land)
    srun -N$nodes -n$nodes --tmpdir bash -c \"for d in \\\$SLURM_TMPDIR/*; do mountpoint -q \\\$d || rm -rf \\\$d; done\"
    for i in \$(seq 1 $rounds); do
      cp many.tar cold\$i.tar
      t base --tmpdir true
      # Every timed step starts from an empty job directory (see above), after a pause.
      for what in \$( [ \$((i % 2)) = 1 ] && echo tar stage || echo stage tar) \$( [ $1 = daemon ] && echo warm); do
        sleep 2
        case \$what in
          tar) t tar --tmpdir bash -c \"mkdir \\\$SLURM_TMPDIR/t\$i && tar -xf many.tar -C \\\$SLURM_TMPDIR/t\$i\" ;;
          stage) t stage --stage-data=cold\$i.tar:s\$i true ;;
          warm) t warm --stage-data=many.tar:w\$i true ;;
        esac
        srun -N$nodes -n$nodes --tmpdir bash -c \"for d in \\\$SLURM_TMPDIR/*; do mountpoint -q \\\$d || rm -rf \\\$d; done\"
      done
      rm -f cold\$i.tar
    done
  '"
}
phases=${STAGEHAND_BENCH_PHASES:-no-daemon daemon}
for p in $phases; do
  case $p in
    no-daemon) for n in ${nodelist//,/ }; do "$cluster" daemon-stop "$n"; done; stopped=1 ;;
    daemon) [ -z "${stopped:-}" ] || for n in ${nodelist//,/ }; do "$cluster" daemon-start "$n"; done ;;
    *) echo "stage_e2e.sh: unknown phase $p" >&2; exit 2 ;;
  esac
  phase "$p"
done

python3 - "$results" "$rounds" "$files" "$nodes" <<'PY'
import statistics, sys
times = {}
for line in open(sys.argv[1]):
    name, us = line.split()
    times.setdefault(name, []).append(int(us) / 1e6)
m = {k: statistics.median(v) for k, v in times.items()}
print(f"cold staging end to end: {int(sys.argv[3]):,} x 2 KiB files in a tar on tmpfs, one srun step each on "
      f"{sys.argv[4]} node(s), {sys.argv[2]} rounds interleaved (median seconds):")
for phase in ("no-daemon", "daemon"):
    if f"{phase}-tar" not in m:
        continue
    b, t, s = m[f"{phase}-base"], m[f"{phase}-tar"], m[f"{phase}-stage"]
    if phase == "no-daemon":
        print(f"  {phase:10s} empty step {b:6.3f}   tar -xf step {t:6.3f}   --stage-data step {s:6.3f}"
              f"   stage / tar = {s / t:.2f}   (target <= 0.6)")
    else:  # a miss fills the node cache as the service user, then links the job's copy
        w = m[f"{phase}-warm"]
        print(f"  {phase:10s} empty step {b:6.3f}   tar -xf step {t:6.3f}   cache miss step {s:6.3f}"
              f"   miss / tar = {s / t:.2f}   cache hit step {w:6.3f}   hit / tar = {w / t:.2f}")
    print("    every round, tar / stage: " +
          "  ".join(f"{a:.3f}/{b:.3f}" for a, b in zip(times[f"{phase}-tar"], times[f"{phase}-stage"])))
PY
