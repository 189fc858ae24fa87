#!/usr/bin/env bats
# stagehandd under load: capacity is the daemon's problem, never the job's. 20 concurrent
# stagings of one user on one node (ordinary for packed array tasks) and four accounts holding 16
# slow requests each: every job succeeds; a request past the daemon's limits waits its turn, and
# one that waited in vain stages without the cache, its summary saying why.
#
# The shared filesystems hold the daemon's requests (sharedfs.py: reads past a file's first MiB,
# or every open) until the test has seen the daemon full, then let them all go: the requests
# overlap however slowly a loaded machine starts the jobs (a fixed delay on each open did not:
# under CI's lanes the 20 jobs started so far apart that no more than 16 ever ran at once).

load helpers

bats_require_minimum_version 1.5.0

SOCK() { echo "$STAGEHAND_CLUSTER_DIR/run/${1:-node1}.sock"; }
status_json() { "$STAGEHAND_BUILD_DIR/helper/stagehand" status --json --config "$STAGEHAND_TEST_CONFIG" --node "${1:-node1}"; }
stagings() { status_json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["stagings"]))'; }

# The other accounts: each holds its own share of the daemon.
OTHERS=(2 3 4 5)
other() { echo "${STAGEHAND_TEST_USER}-$1"; }

as_other() {
  runuser -u "$(other "$1")" -- env SLURM_CONF="$SLURM_CONF" SHELL=/bin/bash PATH="${STAGEHAND_SLURM_BIN:-/usr/bin}:/usr/bin:/bin" \
    bash -c "cd '$WORK/load' && $2"
}

mount_sharedfs() { # SRC MOUNT ARGS...
  local src=$1 mnt=$2
  shift 2
  mkdir -p "$mnt"
  setsid /usr/bin/python3 "$SHAREDFS" "$src" "$mnt" "$@" >>"$STAGEHAND_CLUSTER_DIR/log/sharedfs-load.log" 2>&1 &
  for _ in $(seq 1 600); do [ -e "$mnt/.sharedfs-stats" ] && return 0; sleep 0.1; done
  return 1
}

setup_file() {
  require_sharedfs
  for i in "${OTHERS[@]}"; do
    id "$(other "$i")" >/dev/null 2>&1 || useradd --create-home "$(other "$i")"
  done
  W=$STAGEHAND_CLUSTER_DIR/work
  rm -rf "$W/load" "$W/load-src" "$W/held-src"
  mkdir -p "$W/load-src" "$W/held-src" "$W/load"
  chmod 1777 "$W/load"
  cp "$STAGEHAND_SOURCE_DIR/tests/tools/daemon_requests.py" "$W/load/"
  chmod 0755 "$W/load/daemon_requests.py"
  for i in $(seq 1 20); do head -c 4M /dev/urandom >"$W/load-src/f$i.bin"; done
  head -c 64K /dev/urandom >"$W/held-src/held.bin"
  head -c 1M /dev/urandom >"$W/load/own.bin"
  chmod -R a+rX "$W/load-src" "$W/held-src" "$W/load/own.bin"
  chown "$STAGEHAND_TEST_USER:" "$W/load/own.bin"
  settle "$W/load-src" "$W/held-src" # (a source changed in the last 2 s is never cached)
  # While a gate exists, a request reading there holds its slot: in load-shared every read past a
  # file's first MiB waits (what the job checks itself, its first bytes, gets through), in held
  # every open (only daemon_requests.py reads there).
  rm -f "$W/load.gate" "$W/held.gate"
  mount_sharedfs "$W/load-src" "$W/load-shared" --hold-reads "$W/load.gate"
  mount_sharedfs "$W/held-src" "$W/held" --hold-opens "$W/held.gate"
  # Room for 20 jobs on node1 (4 CPUs): this file only; the default is restored below.
  scontrol update PartitionName=debug OverSubscribe=FORCE:32
}

teardown_file() {
  scontrol update PartitionName=debug OverSubscribe=NO || true
  for m in load-shared held; do
    fusermount -u -z "$STAGEHAND_CLUSTER_DIR/work/$m" 2>/dev/null || umount -l "$STAGEHAND_CLUSTER_DIR/work/$m" 2>/dev/null || true
  done
}

# log_count PATTERN: the node1 daemon's log lines matching PATTERN so far (earlier tests' included).
log_count() { grep -c "$1" "$STAGEHAND_CLUSTER_DIR/log/stagehandd-node1.log" || true; }

# wait_for_log PATTERN COUNT SECONDS: until the node1 daemon's log has more than COUNT such lines.
wait_for_log() {
  local i
  for ((i = 0; i < $3 * 4; i++)); do
    [ "$(log_count "$1")" -gt "$2" ] && return 0
    sleep 0.25
  done
  return 1
}

# Prints the job's exit code once it has ended (job_exit_code), then waits for it to leave the nodes.
finish() {
  local rc
  rc=$(job_exit_code "$1")
  wait_job_done "$1"
  echo "$rc"
}

@test "20 concurrent stagings of one user on one node: all 20 jobs succeed with their own data" {
  # Submitted held (sbatch opens each source to check it), then released together behind the gate.
  for i in $(seq 1 20); do
    as_user "sbatch --parsable -H -N1 -n1 -w node1 --stage-data=load-shared/f$i.bin:d -o out.%j --wrap 'sha256sum \$SLURM_TMPDIR/d'" >"$WORK/load/id.$i" &
  done
  wait
  ids=()
  for i in $(seq 1 20); do ids+=("$(cat "$WORK/load/id.$i")"); done
  touch "$WORK/load.gate"
  waited=$(log_count "waits for a turn")
  scontrol release "$(IFS=,; echo "${ids[*]}")"
  # More than the 16 requests one user may have running arrive while none can end: some wait.
  t0=$SECONDS
  wait_for_log "waits for a turn" "$waited" 300 || { echo "no request waited for a turn in $((SECONDS - t0)) s"; false; }
  echo "a request waited for a turn after $((SECONDS - t0)) s; the reads go on"
  rm "$WORK/load.gate"
  failed=0
  for i in $(seq 1 20); do
    id=${ids[$((i - 1))]}
    rc=$(finish "$id")
    out=$(cat "$WORK/out.$id")
    echo "job $id (f$i.bin): rc $rc: $out"
    [ "$rc" -eq 0 ] || failed=$((failed + 1))
    # The job's own bytes, whichever way they came.
    echo "$out" | grep -q "^$(sha256sum "$WORK/load-src/f$i.bin" | cut -c1-64) "
    summary=$(echo "$out" | grep -E '^stagehand: node1: copied ')
    [ "$(echo "$summary" | wc -l)" -eq 1 ]
    # Through the daemon (its turn came), or without it, saying why; or through it with the cache's
    # fill dropped because the spool could not keep up (a loaded machine: the job is not held back).
    if ! echo "$summary" | grep -q '(cache miss)$'; then
      echo "$summary" | grep -Eq ', (not through the node daemon: the daemon is busy \(.*\)|not cached: the node cache.s disk could not keep up) \(no cache\)$'
    fi
  done
  [ "$failed" -eq 0 ]
  # Everything ended: nothing is left running in the daemon.
  [ "$(stagings)" -eq 0 ]
}

@test "4 accounts holding 16 slow requests each: another user's job still succeeds, without the cache, saying why" {
  touch "$WORK/held.gate" # every request holds its slot until the gate goes
  held=()
  for i in "${OTHERS[@]}"; do
    held+=("$(as_other "$i" "sbatch --parsable -N1 -n1 -w node1 --tmpdir -o held.%j --wrap 'python3 $WORK/load/daemon_requests.py $(SOCK) 16 \$SLURM_JOB_ID $WORK/held/held.bin held'")")
  done
  # Wait until the daemon holds all 64 (the most it runs at once: status shows each after its
  # first progress tick).
  n=0
  t0=$SECONDS
  for _ in $(seq 1 600); do
    n=$(stagings)
    [ "$n" -ge 64 ] && break
    sleep 0.5
  done
  echo "requests held: $n after $((SECONDS - t0)) s"
  [ "$n" -ge 64 ]
  t0=$SECONDS
  submit -N1 -w node1 --stage-data=load/own.bin:mine --wrap "'sha256sum \$SLURM_TMPDIR/mine'"
  echo "$LAST_OUTPUT"
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -q "^$(sha256sum "$WORK/load/own.bin" | cut -c1-64) "
  echo "$LAST_OUTPUT" | grep -q 'the node daemon could not stage (the daemon is busy'
  echo "$LAST_OUTPUT" | grep -qE '^stagehand: node1: copied .*, not through the node daemon: the daemon is busy \(.*\) \(no cache\)$'
  echo "the held-out job took $((SECONDS - t0)) s"
  # The daemon still answers while it is full.
  status_json >/dev/null
  rm "$WORK/held.gate"
  # The holders' jobs succeed too, every request answered.
  for id in "${held[@]}"; do
    rc=$(finish "$id")
    out=$(cat "$WORK/load/held.$id")
    echo "holder $id: rc $rc: $out"
    [ "$rc" -eq 0 ]
    echo "$out" | grep -q '"unanswered": 0'
  done
  for _ in $(seq 1 40); do [ "$(stagings)" -eq 0 ] && break; sleep 0.5; done
  [ "$(stagings)" -eq 0 ]
}
