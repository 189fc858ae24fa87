#!/usr/bin/env bash
# The node daemon's cache against staging without it (issue 25, items 2-4), on the test cluster,
# a FILES-file tar (60,000 x 2 KiB by default), every step an srun step on node1.
#
# Layouts a and b (each round, a then b, in one allocation of node1; every timed step from an
# empty job directory, after a 2 s pause; every staged tree's file count checked, untimed):
#   (a) the daemon's cache_dir on the same tmpfs as the scratch base (the test cluster's own);
#   (b) scratch on tmpfs, cache_dir on the node's disk (STAGEHAND_BENCH_DISK_CACHE, default
#       /var/tmp/sh-bench-cache: a directory of this run's own below it; links are impossible).
#   (c) and (d): as (a) and (b), each with a cache_dir of its own, and the job on a CPU of its own:
#       node1's slurmd (so its jobs' steps and tasks) put on the last CPU for the layout's steps
#       (with the daemon and without it), as Slurm's task plugin or a job's cpuset gives a job its
#       cores on a real node; the daemon runs on all of them (its children doing the job's work go
#       to the job's CPU).
#   Per layout and round:
#     no-daemon  the daemon stopped (in-process staging), --stage-data=<fresh copy>
#     tmpdir     the layout's daemon started again, srun --tmpdir true
#     miss       --stage-data=<fresh copy>           (a key the cache has never seen)
#     hit        --stage-data=many.tar               (staged once through this layout before the rounds)
#   and prints medians of the step's wall time and of the staging time its summary line gives
#   ("... in S s"), miss / no-daemon (also each round's own, median and quartiles), hit / cold (cold: the no-daemon step; as steps, as summary
#   seconds, and as what each adds to a --tmpdir-only step: the staging's own cost, srun's left
#   out), hit / miss and hit - tmpdir (issue 25: miss <= 1.05x no daemon; hit <= 0.02 of cold,
#   <= tmpdir + 0.05 s).
# crowd (the daemon in layout a): each round, ONE job alone, then K=4 and K=16 jobs at once, each
#   its own srun job on node1 staging the same fresh copy (a new key per crowd); a job's task
#   writes when it starts (its staging done), then waits until every job of the crowd has, then
#   counts its files. Prints, per crowd, the median over rounds of: submit to the last job's
#   staging done (wall), and the slowest job's own summary seconds; and last / one for both
#   (issue 25: <= 1.25 for 4, <= 1.5 for 16). Before each crowd, the same K jobs with --tmpdir alone
#   (no staging): Slurm's own floor for K jobs at once on this node, and the crowd's ratio with what K
#   jobs cost Slurm over one taken out. The partition is oversubscribed (FORCE:16) in this
#   cluster so that node1's 4 CPUs run 16 jobs at once.
# Each cache hit, miss or "no cache" a summary line says is checked against what the step
# expects; a mismatch is printed and counted, never silently timed as the other kind.
# Usage (root): bench/daemon.sh BUILD_DIR [ROUNDS] [FILES]   (ROUNDS: 3; FILES: 60000)
#   STAGEHAND_BENCH_PHASES="a b crowd" (the default; c and d on request) picks the parts; STAGEHAND_BENCH_CROWDS="4 16".
#   STAGEHAND_BENCH_LOGS=DIR keeps the cluster's logs (the daemons' among them) there.
#   STAGEHAND_BENCH_PERF=DIR records every CPU's samples over each timed step (perf record -a,
#   1999 Hz, from 0.5 s before it) into DIR/KEY.NS.data: where each step's CPU went, by process.
#   STAGEHAND_BENCH_SHAPE picks the source (the scaling table's shapes): "files" (the default, a tar
#   of FILES x 2 KiB), "tar1g" (a tar of 8 x 128 MiB files), "shards" (a directory of 16 x 64 MiB
#   files: staged as a directory), "tree" (a directory of FILES x 2 KiB), "tar8g" (a tar of 64 x 128 MiB
#   files: STAGEHAND_BENCH_SOURCES=DIR on a disk, since source, spool, entry and the job's copy
#   would take 32 GiB of this 24 GiB machine's tmpfs; layouts b and d, and a, c and the crowds only
#   with the test cluster itself on a disk (STAGEHAND_BENCH_DIR=DIR: the scratch and (a)'s cache
#   there); the disk needs about 24 GiB for the sources and 16 GiB per layout for its cache, the
#   crowds 16 GiB of copies and 8 GiB per entry; the cache may hold 40 GiB).
#   STAGEHAND_BENCH_SOURCES=DIR: the sources (and the bench's own files) in a new directory of
#   this run's own below DIR (removed at the end), not in the test cluster's tmpfs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: daemon.sh BUILD_DIR [ROUNDS] [FILES]}" && pwd)
rounds=${2:-3}
files=${3:-60000}
expect_files=$((files / 1000 * 1000))
shape=${STAGEHAND_BENCH_SHAPE:-files}
case $shape in
  files) src=many.tar; shape_desc="$(printf "%'d" "$files") x 2 KiB files in a tar" ;;
  tar1g) src=many.tar; expect_files=8; shape_desc="a tar of 8 x 128 MiB files" ;;
  tar8g) src=many.tar; expect_files=64; shape_desc="a tar of 64 x 128 MiB files" ;;
  shards) src=shards; expect_files=16; shape_desc="a directory of 16 x 64 MiB shards" ;;
  tree) src=tree; shape_desc="$(printf "%'d" "$files") x 2 KiB files in a directory" ;;
  *) echo "daemon.sh: unknown STAGEHAND_BENCH_SHAPE $shape (files, tar1g, tar8g, shards, tree)" >&2; exit 2 ;;
esac
phases=${STAGEHAND_BENCH_PHASES:-a b crowd}
crowds=${STAGEHAND_BENCH_CROWDS:-4 16}
layouts=""
for p in $phases; do
  case $p in
    a | b | c | d) layouts+="$p " ;;
    crowd) ;;
    *) echo "daemon.sh: unknown phase $p (a, b, c, d, crowd)" >&2; exit 2 ;;
  esac
done
if [ "$shape" = tar8g ]; then
  [ -n "${STAGEHAND_BENCH_SOURCES:-}" ] || { echo "daemon.sh: tar8g needs STAGEHAND_BENCH_SOURCES (a disk)" >&2; exit 2; }
  # Layouts a and c and the crowds put the job's copy, the spool and the entry on the scratch's
  # filesystem: only where the test cluster itself is on a disk (STAGEHAND_BENCH_DIR), not tmpfs.
  cluster_fs=tmpfs
  if [ -n "${STAGEHAND_BENCH_DIR:-}" ]; then
    mkdir -p "$(dirname "$STAGEHAND_BENCH_DIR")"
    cluster_fs=$(df --output=fstype "$(dirname "$STAGEHAND_BENCH_DIR")" | tail -n1)
  fi
  for p in $phases; do
    case $p in
      b | d) ;;
      *) [ "$cluster_fs" != tmpfs ] || {
        echo "daemon.sh: tar8g runs $p only with the test cluster on a disk (STAGEHAND_BENCH_DIR), not on tmpfs" >&2
        exit 2
      } ;;
    esac
  done
fi
source "$here/lib.sh"

bench_cluster_start "$build" daemon
disk_base=${STAGEHAND_BENCH_DISK_CACHE:-/var/tmp/sh-bench-cache}
disk_cache=$disk_base/$STAGEHAND_CLUSTER_PORT
if [ -n "${STAGEHAND_BENCH_SOURCES:-}" ]; then
  B=$(mktemp -d "$(cd "$STAGEHAND_BENCH_SOURCES" && pwd)/sh-bench.XXXXXX")
  chmod 0755 "$B"
else
  B=$W/bench
fi
job=""
cleanup() {
  cd /
  ! declare -F confine >/dev/null || confine off # node1's slurmd back on every CPU
  [ -z "$job" ] || scancel "$job" 2>/dev/null || true
  if [ -n "${STAGEHAND_BENCH_LOGS:-}" ]; then # the daemons' and Slurm's logs, kept for reading
    mkdir -p "$STAGEHAND_BENCH_LOGS" && cp -r "$STAGEHAND_CLUSTER_DIR/log/." "$STAGEHAND_BENCH_LOGS/"
  fi
  "$cluster" stop
  rm -rf "$B" "$disk_cache"
  rmdir "$disk_base" 2>/dev/null || true
}
trap cleanup EXIT
cache_max=16G
[ "$shape" != tar8g ] || cache_max=40G # two entries of 8 GiB: the layout's first and a miss's
sed -i "s/^cache_max_bytes = .*/cache_max_bytes = \"$cache_max\"/" "$STAGEHAND_TEST_CONFIG" "$STAGEHAND_DAEMON_TOML"
sed -i 's/^progress_interval = .*/progress_interval = "0"/' "$STAGEHAND_TEST_CONFIG"
# GC passes as often as conf/stagehand.toml has them, not the test cluster's every 3 s: a pass asks
# slurmctld (squeue) and, every 3 s, one in two of the daemon's steps paid for it beside its staging
# while the steps without the daemon never did (perf record over the steps, 2026-11-28).
sed -i 's/^gc_interval = .*/gc_interval = "5m"/' "$STAGEHAND_TEST_CONFIG" "$STAGEHAND_DAEMON_TOML"
tmpfs_cache=$(sed -n 's/^cache_dir = "\(.*\)"$/\1/p' "$STAGEHAND_TEST_CONFIG")
[ -n "$tmpfs_cache" ] || { echo "daemon.sh: no cache_dir in $STAGEHAND_TEST_CONFIG" >&2; exit 1; }
confined_cache=$(dirname "$tmpfs_cache")/confined-$(basename "$tmpfs_cache") # (c): (a)'s filesystem, a cache of its own
# The disk cache: a root-owned 0700 directory of this run's own (the daemon takes nothing else).
rm -rf "$disk_cache"
mkdir -p -m 0700 "$disk_cache"
echo "daemon.sh: scratch on $(df --output=fstype "$STAGEHAND_SCRATCH" | tail -n1), layout (a) cache on" \
  "$(df --output=fstype "$STAGEHAND_CLUSTER_DIR" | tail -n1), layout (b) cache on $(df --output=fstype "$disk_cache" | tail -n1) ($disk_cache)" >&2
# 16 jobs at once on node1 (4 CPUs): every CPU may be given to up to 16 jobs.
scontrol update PartitionName=debug OverSubscribe=FORCE:16

mkdir -p "$B"
case $shape in
  files | tree) bench_small_tree "$B/tree" "$files" ;;
  tar1g | tar8g)
    mkdir -p "$B/tree"
    for i in $(seq 1 "$expect_files"); do head -c 128M /dev/urandom >"$B/tree/part$i"; done
    ;;
  shards) mkdir -p "$B/shards" && for i in $(seq 1 16); do head -c 64M /dev/urandom >"$B/shards/shard$i"; done ;;
esac
if [ "$shape" = files ] || [ "$shape" = tar1g ] || [ "$shape" = tar8g ]; then
  tar -C "$B/tree" -cf "$B/many.tar" .
  rm -rf "$B/tree"
fi
chown -R "$STAGEHAND_TEST_USER:" "$B"
results=$B/times
: >"$results"
cd "$B"

# The test user's srun (or any client), in $B.
as_user() { runuser -u "$STAGEHAND_TEST_USER" -- env SLURM_CONF="$SLURM_CONF" PATH="$PATH" "$@"; }

# fresh NAME: a fresh copy of the source (a key no cache has seen), the test user's.
fresh() { cp -r "$src" "$1" && chown -R "$STAGEHAND_TEST_USER:" "$1"; }

# use_daemon off|a|b|c: node1's daemon stopped, or started again with that layout's cache_dir.
use_daemon() {
  "$cluster" daemon-stop node1
  case $1 in
    off) return 0 ;;
    a) sed -i "s|^cache_dir = .*|cache_dir = \"$tmpfs_cache\"|" "$STAGEHAND_TEST_CONFIG" ;;
    b) sed -i "s|^cache_dir = .*|cache_dir = \"$disk_cache/%n\"|" "$STAGEHAND_TEST_CONFIG" ;;
    c) sed -i "s|^cache_dir = .*|cache_dir = \"$confined_cache\"|" "$STAGEHAND_TEST_CONFIG" ;;
    d) sed -i "s|^cache_dir = .*|cache_dir = \"$disk_cache/confined-%n\"|" "$STAGEHAND_TEST_CONFIG" ;;
  esac
  "$cluster" daemon-start node1
}

# confine c|d|...: node1's slurmd (and what it starts from now: steps, tasks) on the last CPU for
# layouts c and d, on all of them otherwise. The daemon, started by this script, stays on all of them.
slurmd_cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' "/proc/$(cat "$STAGEHAND_CLUSTER_DIR/slurmd-node1.pid")/status")
confine() {
  local pid
  pid=$(cat "$STAGEHAND_CLUSTER_DIR/slurmd-node1.pid" 2>/dev/null) || return 0
  if [ "$1" = c ] || [ "$1" = d ]; then
    [ "${slurmd_cpus##*[,-]}" != "$slurmd_cpus" ] || { echo "daemon.sh: layout $1: node1's slurmd has one CPU ($slurmd_cpus)" >&2; exit 1; }
    taskset -a -p -c "${slurmd_cpus##*[,-]}" "$pid" >/dev/null # its last CPU
  else
    taskset -a -p -c "$slurmd_cpus" "$pid" >/dev/null 2>&1 || true # those it had
  fi
}

# summary FILE: "SECONDS WORD" of the one staging summary line in FILE (WORD: miss, hit, none, or
# dropped: a miss whose fill the daemon gave up because the cache's disk could not keep up).
summary() {
  sed -nE 's/^stagehand: node1: .*: [0-9]+ files, .* in ([0-9.]+) s.*\((cache miss|cache hit|no cache)\)$/\1 \2/p' "$1" |
    sed -e 's/cache miss/miss/; s/cache hit/hit/; s/no cache/none/' | head -n1 |
    if grep -q "could not keep up" "$1"; then sed 's/ none$/ dropped/'; else cat; fi
}

mismatches=0
# check_word KEY EXPECTED GOT FILE
check_word() {
  [ "$2" != miss ] || [ "$3" != dropped ] || return 0 # a miss, its fill given up for the disk: said so below
  if [ "$2" != "$3" ]; then
    mismatches=$((mismatches + 1))
    echo "daemon.sh: $1: expected a cache '$2', the summary says '${3:-(no summary line)}':" >&2
    sed 's/^/  | /' "$4" >&2
  fi
}

# count_and_clean DEST: the number of files under the job directory's DEST (untimed), then the job
# directory emptied; exits unless it is the tree's.
count_and_clean() {
  local n
  n=$(as_user srun --jobid="$job" -N1 -n1 -w node1 --quiet --tmpdir bash -c \
    'n=$(find "${SLURM_TMPDIR:?}/$0" -type f | wc -l); for d in "${SLURM_TMPDIR:?}"/*; do mountpoint -q "$d" || rm -rf "$d"; done; echo $n' "$1")
  if [ "$n" != "$expect_files" ]; then
    echo "daemon.sh: $1: $n files staged, not $expect_files" >&2
    exit 1
  fi
}

# step KEY EXPECT DEST SRUN-ARGS...: one timed step in the allocation (after a 2 s pause; DEST a
# name no step of the job used before: a job stages a name once), its
# wall time, summary seconds and cache word recorded under KEY; then its tree counted, untimed.
step() {
  local key=$1 expect=$2 dest=$3 t0 t1 s
  shift 3
  sleep 2
  local perf_pid=""
  if [ -n "${STAGEHAND_BENCH_PERF:-}" ]; then # every CPU's samples over the step, for perf report
    mkdir -p "$STAGEHAND_BENCH_PERF"
    perf record -a -F 1999 -q -o "$STAGEHAND_BENCH_PERF/$key.$(date +%s%N).data" 2>/dev/null &
    perf_pid=$!
    sleep 0.5
  fi
  t0=$(date +%s%N)
  as_user srun --jobid="$job" -N1 -n1 -w node1 "$@" true >"$B/step.out" 2>&1 ||
    { echo "daemon.sh: $key failed:" >&2; cat "$B/step.out" >&2; exit 1; }
  t1=$(date +%s%N)
  if [ -n "$perf_pid" ]; then
    kill -INT "$perf_pid" && wait "$perf_pid" || true
  fi
  if [ "$expect" = - ]; then
    echo "$key $(((t1 - t0) / 1000)) - -" >>"$results"
    as_user srun --jobid="$job" -N1 -n1 -w node1 --quiet --tmpdir bash -c 'for d in "${SLURM_TMPDIR:?}"/*; do mountpoint -q "$d" || rm -rf "$d"; done'
    return 0
  fi
  s=$(summary "$B/step.out")
  check_word "$key" "$expect" "${s#* }" "$B/step.out"
  echo "$key $(((t1 - t0) / 1000)) ${s:-- -}" >>"$results"
  count_and_clean "$dest"
}

dropped_layouts=""
if [ -n "$layouts" ]; then
  job=$(as_user salloc -N1 -n1 -w node1 --no-shell 2>&1 | sed -nE 's/.*Granted job allocation ([0-9]+).*/\1/p')
  [ -n "$job" ] || { echo "daemon.sh: no allocation" >&2; exit 1; }
  # Each layout's cache gets many.tar once: every hit below is one.
  sleep 3 # (a source modified within 2 s of its staging is not cached: the racy-source rule)
  for l in $layouts; do
    use_daemon "$l"
    confine "$l"
    step "$l-warmup" miss "w$l" --stage-data="$src:w$l"
    confine off
    if [ "$(awk -v k="$l-warmup" '$1 == k { w = $4 } END { print w }' "$results")" = dropped ]; then
      echo "daemon.sh: layout $l: the cache's disk could not keep up with the source: its fill was dropped (no hit steps)" >&2
      dropped_layouts+="$l "
      continue
    fi
    # (and the entry is where the layout says: the daemon took the cache_dir it was given)
    case $l in
      a) d=${tmpfs_cache//%n/node1} ;;
      b) d=$disk_cache/node1 ;;
      c) d=${confined_cache//%n/node1} ;;
      d) d=$disk_cache/confined-node1 ;;
    esac
    # A miss's entry is filled after its job has the data (off the job's path): wait for it.
    for _ in $(seq 1 600); do [ -n "$(ls -A "$d/entries" 2>/dev/null)" ] && break; sleep 0.2; done
    [ -n "$(ls -A "$d/entries" 2>/dev/null)" ] || { echo "daemon.sh: layout $l: no cache entry in $d" >&2; exit 1; }
    echo "daemon.sh: layout $l: the cache entry is in $d ($(df --output=fstype "$d" | tail -n1)), $(du -sh "$d" | cut -f1)" >&2
  done
  for i in $(seq 1 "$rounds"); do
    for l in $layouts; do fresh "nd-$l-$i.tar"; fresh "miss-$l-$i.tar"; done
    sleep 3
    for l in $layouts; do
      confine "$l"
      use_daemon off
      step "$l-nodaemon" none "n$l$i" --stage-data="nd-$l-$i.tar:n$l$i"
      use_daemon "$l"
      step "$l-tmpdir" - - --tmpdir
      # miss and hit in either order, alternating by round
      order=$([ $((i % 2)) = 1 ] && echo miss hit || echo hit miss)
      [[ " $dropped_layouts " != *" $l "* ]] || order=miss
      for what in $order; do
        case $what in
          miss) step "$l-miss" miss "m$l$i" --stage-data="miss-$l-$i.tar:m$l$i" ;;
          hit) step "$l-hit" hit "h$l$i" --stage-data="$src:h$l$i" ;;
        esac
      done
      rm -rf "nd-$l-$i.tar" "miss-$l-$i.tar"
      confine off
    done
    echo "daemon.sh: round $i of $rounds done" >&2
  done
  scancel "$job"
  job=""
fi

# crowd K ROUND [floor]: K jobs at once on node1, each staging the same fresh copy; records
# "crowd-K WALL_US SLOWEST_SUMMARY_S WORDS". With "floor": the same K jobs with --tmpdir alone (no
# staging), recorded as "floor-K WALL_US - -": what starting K jobs at once costs Slurm on this node.
crowd() {
  local k=$1 i=$2 tar=crowd-$1-$2.tar j t0 n deadline last=0 slowest=0 words="" s t
  local -a pids=() what=(--stage-data="$tar:c")
  [ "${3:-}" != floor ] || what=(--tmpdir)
  rm -f release crowd.*.out
  t0=$(date +%s%N)
  for j in $(seq 1 "$k"); do
    as_user srun -N1 -n1 -w node1 --quiet "${what[@]}" bash -c '
      echo "T $(date +%s%N)"
      end=$((SECONDS + 900))
      while [ ! -e release ] && [ $SECONDS -lt $end ]; do sleep 0.05; done
      [ ! -d "${SLURM_TMPDIR:?}/c" ] || echo "N $(find "${SLURM_TMPDIR:?}/c" -type f | wc -l)"' >"crowd.$j.out" 2>&1 &
    pids+=($!)
  done
  # Every job's staging done (its task started) before any counts: the counts are untimed.
  deadline=$((SECONDS + 900))
  while :; do
    n=$(cat crowd.*.out 2>/dev/null | grep -c '^T ' || true)
    [ "$n" -lt "$k" ] || break
    if [ $SECONDS -ge $deadline ]; then
      echo "daemon.sh: crowd of $k: only $n jobs started in 900 s (can node1 run $k at once?)" >&2
      exit 1
    fi
    sleep 0.05
  done
  touch release
  for j in "${!pids[@]}"; do
    wait "${pids[$j]}" || { echo "daemon.sh: crowd of $k: job $((j + 1)) failed:" >&2; cat "crowd.$((j + 1)).out" >&2; exit 1; }
  done
  for j in $(seq 1 "$k"); do
    t=$(sed -n 's/^T //p' "crowd.$j.out")
    [ "$t" -le "$last" ] || last=$t
    [ "${3:-}" != floor ] || continue
    n=$(sed -n 's/^N //p' "crowd.$j.out")
    [ "$n" = "$expect_files" ] || { echo "daemon.sh: crowd of $k: job $j staged $n files, not $expect_files" >&2; exit 1; }
    s=$(summary "crowd.$j.out")
    [ -n "$s" ] || { echo "daemon.sh: crowd of $k: job $j printed no summary line:" >&2; cat "crowd.$j.out" >&2; exit 1; }
    slowest=$(awk -v a="$slowest" -v b="${s% *}" 'BEGIN { print (b > a ? b : a) }')
    words+="${s#* },"
  done
  if [ "${3:-}" = floor ]; then
    echo "floor-$k $(((last - t0) / 1000)) - -" >>"$results"
  else
    echo "crowd-$k $(((last - t0) / 1000)) $slowest ${words%,}" >>"$results"
    # Its fill done before the next crowd starts (untimed): a 600,000-file fill takes seconds,
    # and one still unpacking would run beside the next crowd's read.
    for _ in $(seq 1 600); do
      grep -F "$B/$tar" "$STAGEHAND_CLUSTER_DIR/log/stagehandd-node1.log" | grep -q cached && break
      sleep 0.2
    done
    rm -rf "$tar"
  fi
  rm -rf release crowd.*.out
}

case " $phases " in
  *" crowd "*)
    use_daemon a
    for i in $(seq 1 "$rounds"); do
      for k in 1 $crowds; do fresh "crowd-$k-$i.tar"; done
      sleep 3
      for k in 1 $crowds; do
        sleep 2
        crowd "$k" "$i" floor
        sleep 2
        crowd "$k" "$i"
      done
      echo "daemon.sh: crowd round $i of $rounds done" >&2
    done
    ;;
esac

# What the daemon logged that looks wrong (its log goes with the cluster).
bad=$(grep -iE 'error|warn|fail' "$STAGEHAND_CLUSTER_DIR/log/stagehandd-node1.log" || true)
if [ -n "$bad" ]; then
  echo "daemon.sh: node1's stagehandd logged $(wc -l <<<"$bad") error/warning lines, the last ones:" >&2
  tail -n 5 <<<"$bad" | sed 's/^/  | /' >&2
fi

where="on $(df --output=fstype "$B" | tail -n1)"
python3 - "$results" "$rounds" "$shape_desc $where" "$mismatches" \
  "$(df --output=fstype "$STAGEHAND_SCRATCH" | tail -n1)" "$(df --output=fstype "$disk_base" | tail -n1)" <<'PY'
import statistics, sys
steps, summ, words = {}, {}, {}
for line in open(sys.argv[1]):
    key, us, s, w = line.split()
    steps.setdefault(key, []).append(int(us) / 1e6)
    if s != "-":
        summ.setdefault(key, []).append(float(s))
    words.setdefault(key, []).append(w)
med = lambda d, k: statistics.median(d[k]) if d.get(k) else float("nan")
print(f"daemon cache: {sys.argv[3]}, one srun step on node1, "
      f"{sys.argv[2]} rounds interleaved; medians in seconds: the step's wall time / its summary line's staging time")
scratch_fs, disk_fs = sys.argv[5], sys.argv[6]
names = {"a": f"(a) cache_dir on the scratch's {scratch_fs}", "b": f"(b) scratch on {scratch_fs}, cache_dir on the node's {disk_fs} disk",
         "c": "(c) as (a), the job's steps on one CPU of their own (as a task plugin or cpuset gives), the daemon on all",
         "d": "(d) as (b), the job's steps on one CPU of their own, the daemon on all"}
for l in "abcd":
    if f"{l}-miss" not in steps:
        continue
    print(f"  {names[l]}:")
    for what in ("tmpdir", "nodaemon", "miss", "hit"):
        k = f"{l}-{what}"
        if k not in steps:
            print(f"    {what:9s} no steps: the layout's first fill was dropped (the cache's disk could not keep up)")
            continue
        sm = f"{med(summ, k):7.3f}" if k in summ else "      -"
        rr = "  ".join(f"{v:.3f}" for v in steps[k])
        print(f"    {what:9s} step {med(steps, k):7.3f}   staging {sm}   rounds: {rr}")
    t, n, m, h = (med(steps, f"{l}-{x}") for x in ("tmpdir", "nodaemon", "miss", "hit"))
    sn, sm_, sh = (med(summ, f"{l}-{x}") for x in ("nodaemon", "miss", "hit"))
    print(f"    miss / no-daemon  = {m / n:.2f} (step)  {sm_ / sn:.2f} (staging)   (target <= 1.05)")
    # Each round's own ratio (its miss against its no-daemon step, minutes apart at most): this VM's
    # speed drifts between rounds, which a ratio of medians carries and a round's own ratio does not.
    own = sorted(a / b for a, b in zip(steps[f"{l}-miss"], steps[f"{l}-nodaemon"]))
    if len(own) >= 4:
        q = lambda p: own[min(len(own) - 1, int(p * len(own)))]
        print(f"    miss / no-daemon, each round's own: median {statistics.median(own):.2f}, "
              f"quartiles {q(0.25):.2f}-{q(0.75):.2f}")
    dropped = sum(w == "dropped" for w in words.get(f"{l}-miss", []))
    if dropped:
        print(f"    {dropped} of {len(words[f'{l}-miss'])} misses delivered without their fill (the cache's disk could not keep up)")
    if f"{l}-hit" not in steps:
        continue
    print(f"    hit / cold        = {h / n:.2f} (step)  {sh / sn:.3f} (staging)  "
          f"{(h - t) / max(n - t, 1e-9):.3f} (what each adds to a --tmpdir-only step)   "
          "(cold: the no-daemon step; target <= 0.02)")
    print(f"    hit / miss        = {h / m:.2f} (step)  {sh / sm_:.3f} (staging)")
    print(f"    hit - tmpdir-only = {h - t:+.3f} s (step)   (target <= 0.05)")
if "crowd-1" in steps:
    print("  crowd, the daemon in layout (a): K jobs at once on node1 staging the same fresh source "
          "(submit to the last job's staging done / the slowest job's summary seconds):")
    one_w, one_s = med(steps, "crowd-1"), med(summ, "crowd-1")
    floor1 = med(steps, "floor-1")
    for key in sorted((k for k in steps if k.startswith("crowd-")), key=lambda k: int(k[6:])):
        K = int(key[6:])
        w, s = med(steps, key), med(summ, key)
        kinds = [x.split(",") for x in words[key]]
        hits = statistics.median([x.count("hit") for x in kinds])
        misses = statistics.median([x.count("miss") for x in kinds])
        rr = "  ".join(f"{a:.3f}/{b:.3f}" for a, b in zip(steps[key], summ[key]))
        line = f"    K={K:<3d} last done {w:7.3f}   slowest staging {s:7.3f}"
        if K > 1:
            line += f"   last / one = {w / one_w:.2f} (wall)  {s / one_s:.2f} (staging)"
            line += f"   ({misses:g} miss, {hits:g} hits)"
        print(line + f"   rounds: {rr}")
        fk = f"floor-{K}"
        if fk in steps:
            f = med(steps, fk)
            rf = "  ".join(f"{a:.3f}" for a in steps[fk])
            line = f"          --tmpdir only (Slurm's floor): last started {f:7.3f}"
            if K > 1:
                # what K jobs cost Slurm here over one, taken out of the crowd's time
                line += f" ({f / floor1:.2f}x one)   (last - what K cost Slurm over one) / one = {(w - (f - floor1)) / one_w:.2f}"
            print(line + f"   rounds: {rf}")
    print("    (target: last / one <= 1.25 for K=4, <= 1.5 for K=16)")
if int(sys.argv[4]):
    print(f"  WARNING: {sys.argv[4]} steps' summary lines named another cache outcome than expected (see above)")
PY
