#!/usr/bin/env bats
# stagehandd run directly on a socket of its own (no Slurm; root plays the prolog): the node
# cache's limits as a user meets them: many tiny sources, the number of entries, the cache's size
# against entries running jobs use, and [stage] max_bytes per job; a full scratch; what
# `stagehand prolog`, as a Prolog= script, tells it of a job; a reload that hangs, and a cache disk
# that stops answering. Run by ctest with STAGEHAND_DAEMON_BIN and STAGEHAND_BIN set; needs root.

bats_require_minimum_version 1.5.0

setup() {
  : "${STAGEHAND_DAEMON_BIN:?set by ctest}"
  T=$(mktemp -d /dev/shm/stagehand-limits.XXXXXX)
  chmod 0755 "$T"
  mkdir -p "$T/scratch/n1/job_77" "$T/scratch/n1/job_78" "$T/src"
  chown 4242:4242 "$T/scratch/n1/job_77" "$T/scratch/n1/job_78" "$T/src"
  chmod 0700 "$T/scratch/n1/job_77" "$T/scratch/n1/job_78"
  cat >"$T/stagehand.toml" <<TOML
[tmpdir]
base = "$T/scratch/%n"
[daemon]
socket = "$T/run/%n.sock"
state_dir = "$T/state/%n"
cache_dir = "$T/cache/%n"
user = "nobody"
gc_interval = "1s"
TOML
  chmod 0644 "$T/stagehand.toml"
  # The protocol (docs/protocol.md) from Python: call(request) -> the result frame.
  cat >"$T/client.py" <<'PY'
import json, os, socket, struct, sys
SOCK = os.environ['SOCK']
def call(obj, timeout=120):
    s = socket.socket(socket.AF_UNIX); s.settimeout(timeout); s.connect(SOCK)
    b = json.dumps(obj).encode(); s.sendall(struct.pack('>I', len(b)) + b)
    def exactly(n):
        data = b''
        while len(data) < n:
            c = s.recv(n - len(data))
            if not c: raise RuntimeError('the daemon closed the connection')
            data += c
        return data
    while True:
        m = json.loads(exactly(struct.unpack('>I', exactly(4))[0]))
        if m.get('type') != 'progress':
            s.close(); return m
def source(src, name, dest=None):
    return {'shown': name, 'path': os.path.join(src, name), 'dest': dest or 'd/' + name, 'kind': 'file', 'unpack': 'never'}
def stage(job, sources, max_bytes=1 << 40, timeout=900):
    # 250 quick sources send no progress frame (one every 5 s of a single child): under CI's lanes
    # on a slow VM such a request took more than 120 s of silence.
    return call({'v': 1, 'op': 'stage', 'job_id': job, 'max_bytes': max_bytes, 'sources': sources}, timeout)
def register(job):
    r = call({'v': 1, 'op': 'register', 'job_id': job, 'uid': 4242, 'gid': 4242}); assert r.get('ok'), r
def end(job):
    r = call({'v': 1, 'op': 'end_job', 'job_id': job, 'trash': '', 'keep_until': 0}); assert r.get('ok'), r
def cache():
    return call({'v': 1, 'op': 'status'})['cache']
def settled(want=None, timeout=60):
    # A miss's entry is made after its reply (the fill thread): the cache once that is done.
    import time
    deadline = time.monotonic() + timeout
    while True:
        c = cache()
        if (want is None or c['entries'] == want) and not busy() or time.monotonic() > deadline:
            return c
        time.sleep(0.05)
def busy():
    # Fills still waiting or running show in the log's "cached"/"not cached" lines only; poll the
    # daemon's view of the cache twice a little apart: unchanged means settled.
    import time
    a = cache(); time.sleep(0.3); b = cache()
    return a != b
PY
  export SOCK="$T/run/n1.sock" PYTHONPATH="$T"
}

teardown() {
  stop_stuckfs # the FUSE servers first: what waits on them (the daemon too) then ends
  stop_hangingdisk
  if mountpoint -q "$T/scratch/n1"; then umount -l "$T/scratch/n1"; fi # (a test's full scratch)
  [ -z "${DAEMON:-}" ] || kill "$DAEMON" 2>/dev/null || true
  [ -z "${DAEMON:-}" ] || wait "$DAEMON" 2>/dev/null || true
  rm -rf "$T"
}

# start_daemon [WRAPPER...]: the daemon (run by WRAPPER, which execs it, when given), once it listens.
start_daemon() {
  "$@" "$STAGEHAND_DAEMON_BIN" --config "$T/stagehand.toml" --node n1 >"$T/daemon.log" 2>&1 &
  DAEMON=$!
  for _ in $(seq 1 100); do grep -q "listening on" "$T/daemon.log" && return 0; sleep 0.1; done
  cat "$T/daemon.log"
  false
}

# start_fuse_tool VAR NAME MOUNT ARGS...: tests/tools/NAME.py ARGS in the background, its pid in
# the variable VAR, its output in $T/NAME.out; returns once MOUNT is mounted.
start_fuse_tool() {
  local var=$1 name=$2 mount=$3
  shift 3
  mkdir -p "$mount"
  setsid /usr/bin/python3 "$BATS_TEST_DIRNAME/../tools/$name.py" "$@" >"$T/$name.out" 2>&1 </dev/null &
  printf -v "$var" '%s' "$!"
  for _ in $(seq 1 300); do grep -q " $mount " /proc/self/mountinfo && return 0; sleep 0.1; done
  echo "$name did not mount (needs /dev/fuse, python3-fusepy, libfuse2):" >&2
  cat "$T/$name.out" >&2
  return 1
}

# kill_fuse_tool VAR: the server whose pid VAR holds killed: what it held fails (ENOTCONN), so its
# sleepers end; its mount stays, dead (every use of it fails), until detach_mount.
kill_fuse_tool() {
  local var=$1
  [ -n "${!var:-}" ] || return 0
  kill -9 "${!var}" 2>/dev/null || true
  wait "${!var}" 2>/dev/null || true
  printf -v "$var" '%s' ""
}

# detach_mount MOUNT: lazily, so that nothing here waits on it.
detach_mount() {
  if [ -n "${T:-}" ] && grep -q " $1 " /proc/self/mountinfo; then
    fusermount -u -z "$1" 2>/dev/null || umount -l "$1" || true
  fi
}

# gone_once_the_server_is STOP: a daemon that stopped serving, held by a thread in a FUSE request,
# ends once STOP (stop_stuckfs, stop_hangingdisk) takes that server away.
gone_once_the_server_is() {
  "$1"
  run timeout -s KILL 120 tail --pid="$DAEMON" -f /dev/null
  [ "$status" -eq 0 ]
  wait "$DAEMON" || true
  DAEMON=
}

# A FUSE server at $T/stuck that answers until $T/stuck-now exists, then nothing
# (tests/tools/stuckfs.py; each request it holds is a line "hung OP PATH pid PID" in $T/stuckfs.log).
start_stuckfs() { start_fuse_tool STUCKFS stuckfs "$T/stuck" "$T/stuck" "$T/stuck-now" 4242 "$T/stuckfs.log"; }
kill_stuckfs() { kill_fuse_tool STUCKFS; }
stop_stuckfs() {
  kill_fuse_tool STUCKFS
  detach_mount "${T:-}/stuck"
}

# $T/cache shown at $T/hcache by a FUSE server that stops answering once $T/hang-now exists, and
# answers again (the held requests too) once $T/resume-now does
# (tests/tools/hangingdisk.py; each request it holds is a line "hung OP PATH pid PID" in $T/hangingdisk.log).
start_hangingdisk() {
  start_fuse_tool HANGINGDISK hangingdisk "$T/hcache" "$T/cache" "$T/hcache" "$T/hang-now" "$T/hangingdisk.log" \
    "$T/resume-now"
}
stop_hangingdisk() {
  kill_fuse_tool HANGINGDISK
  detach_mount "${T:-}/hcache"
}

# cache_dir moved onto the FUSE server, which then stops answering, and SIGHUP: waits until the
# daemon's reload is held there, by a thread of the daemon's that is not its main one (the server
# loop's); prints the server's log.
reload_into_stuckfs() {
  sed -i "s|^cache_dir = .*|cache_dir = \"$T/stuck/cache/%n\"|" "$T/stagehand.toml"
  touch "$T/stuck-now"
  kill -HUP "$DAEMON"
  for _ in $(seq 1 300); do grep -q "^hung " "$T/stuckfs.log" 2>/dev/null && break; sleep 0.1; done
  cat "$T/stuckfs.log"
  local tid
  tid=$(sed -n 's/^hung .* pid \([0-9]*\)$/\1/p' "$T/stuckfs.log" | head -n1)
  [ -n "$tid" ] && [ -d "/proc/$DAEMON/task/$tid" ] && [ "$tid" != "$DAEMON" ]
}

# Registers job $1 and stages $T/src/f00000 for it through the daemon (with "settled" as $2: once
# the fills under way are done); prints "staged: [its outcome]".
stage_first_source() {
  timeout -s KILL 300 python3 -c '
import sys
from client import register, settled, source, stage
if sys.argv[3] == "settled":
    settled(1)
register(int(sys.argv[2]))
r = stage(int(sys.argv[2]), [source(sys.argv[1], "f00000")], timeout=120); assert r["ok"], r
print("staged:", [s["cache"] for s in r["staged"]])
' "$T/src" "$1" "${2:-}"
}

# $1 files of $2 bytes each, f00000..., owned by the job user.
make_sources() {
  setpriv --reuid 4242 --regid 4242 --clear-groups /usr/bin/python3 -c '
import os, sys
for i in range(int(sys.argv[2])):
    with open(os.path.join(sys.argv[1], "f%05d" % i), "w") as f:
        f.write(chr(48 + i % 10) * int(sys.argv[3]))
' "$T/src" "$1" "$2"
  # A source changed in the last 2 s is never cached (the racy-source rule): wait until these are
  # older than that.
  local newest
  for _ in $(seq 1 100); do
    newest=$(find "$T/src" -printf '%C@\n%T@\n' | sort -n | tail -n1)
    awk -v n="$newest" -v t="$(date +%s.%N)" 'BEGIN { exit !(t - n > 2.1) }' && return 0
    sleep 0.1
  done
  return 1
}

# bats test_tags=latency
@test "10,000 tiny distinct sources staged through the daemon: status answers as fast with 10,000 entries as with none" {
  make_sources 10000 1
  start_daemon
  # Stage requests of 250 sources each (what fits in a request frame), two at a time, while
  # another client asks for status every 20 ms and times each answer. The stall this test is about
  # grew with the entries (220 ms at 3,100 before the in-memory index, about 700 ms at 10,000): the
  # answers of the run's last fifth (8,000 entries and more) are held to those of its first fifth,
  # same run, 99th percentile within twice and 50 ms, and none past 2 s. Each status call is
  # followed by a call the daemon refuses as soon as it reads it (an unknown operation: the same
  # socket, queue and request thread, no lock, nothing that grows with the entries), and what that
  # control's 99th percentile grew by from the first fifth to the last is taken off the last
  # fifth's: load that came or went in the middle of the run (the cluster tests that CI starts
  # beside this one) slows both alike; entries slow status alone. And the median of each status
  # call less its control call, last fifth against first, within twice and 20 ms: a cost every
  # call pays, which one slow control call cannot hide. The poller runs until the cache has all
  # 10,000 entries, so that the last fifth is never empty. The absolute figure (99 in 100
  # within 100 ms on an idle node) is printed, not asserted: on CI's two shared cores (two Slurm
  # clusters and a build beside, on a slower VM) the client's own turns on the cores are in it.
  cat >"$T/load.py" <<'PY'
import sys, threading, time
from client import call, source, stage, register
src, limit_ms = sys.argv[1], float(sys.argv[2])
register(77)
N, PER = 10000, 250
batches = [range(i, min(i + PER, N)) for i in range(0, N, PER)]
failed = []
def stager(mine):
    for b in mine:
        r = stage(77, [source(src, 'f%05d' % i) for i in b])
        if not r.get('ok'): failed.append(r)
done = threading.Event()
worst, count, slow, times, seen, control, pairs = 0.0, 0, [], [], [], [], []
def timed(request):
    t0 = time.monotonic()
    r = call(request, timeout=10)
    return r, (time.monotonic() - t0) * 1000
broke = []
def poller():
    try:
        poll()
    except Exception as e: # (an assert in a thread would only print)
        broke.append(repr(e))
def poll():
    global worst, count
    while not done.is_set():
        r, ms = timed({'v': 1, 'op': 'status'})
        assert r.get('ok'), r
        count += 1; worst = max(worst, ms); times.append(ms); seen.append((r['cache']['entries'], ms))
        if ms > limit_ms: slow.append((round(ms, 1), r['cache']['entries']))
        c, cms = timed({'v': 1, 'op': 'latency-control'})
        assert c.get('ok') is False and 'unknown operation' in c.get('error', ''), c
        control.append((r['cache']['entries'], cms))
        pairs.append((r['cache']['entries'], ms - cms))
        time.sleep(0.02)
p = threading.Thread(target=poller); p.start()
t0 = time.monotonic()
workers = [threading.Thread(target=stager, args=(batches[k::2],)) for k in range(2)]
for w in workers: w.start()
for w in workers: w.join()
staged = time.monotonic() - t0
from client import settled
try:
    entries = settled(N)['entries'] # (polled meanwhile: the last fifth's entries may come after the stagings)
finally:
    done.set(); p.join()
def p99(ms):
    ms = sorted(ms)
    return ms[int(len(ms) * 0.99)] if ms else 0.0
def median(ms):
    return sorted(ms)[len(ms) // 2] if ms else 0.0
def fifths(calls, of=p99):
    return of([ms for e, ms in calls if e < N // 5]), of([ms for e, ms in calls if e >= N - N // 5])
early, late = fifths(seen)
control_early, control_late = fifths(control)
load_grew = max(0.0, control_late - control_early)
# Each status call less the control call right after it, the fifths' medians: what every call
# pays for the entries, which load slows both calls of a pair for alike and one stalled call
# cannot hide (a slow control call makes its pair's difference smaller, not the others').
pair_early, pair_late = fifths(pairs, median)
late_pairs = sum(1 for e, d in pairs if e >= N - N // 5)
print('staged %d sources in %.1f s; %d status calls, 99th percentile %.1f ms (target %.0f ms), slowest %.1f ms; '
      'under %d entries %.1f ms, from %d on %.1f ms (the control call: %.1f ms, %.1f ms); %d cache entries'
      % (N, staged, count, p99(times), limit_ms, worst, N // 5, early, N - N // 5, late, control_early,
         control_late, entries))
print('status less its control call, medians: under %d entries %.1f ms, from %d on %.1f ms (%d pairs)'
      % (N // 5, pair_early, N - N // 5, pair_late, late_pairs))
print('failed requests:', failed[:2])
print('status calls over %.0f ms (ms, entries then):' % limit_ms, slow[:10])
grew = late - load_grew > 2 * early + 50 or pair_late > 2 * max(pair_early, 0.0) + 20
print('the poller broke:', broke) if broke else None
print('no status call saw the last fifth') if late_pairs < 10 else None
sys.exit(1 if failed or broke or not times or grew or late_pairs < 10 or worst > 2000 or entries != N else 0)
PY
  run python3 "$T/load.py" "$T/src" 100
  echo "$output"
  # A failed request: what the daemon said of it (its children's stderr is /dev/null), kept in CI's log.
  [ "$status" -eq 0 ] || grep -E "signal|error|warning" "$T/daemon.log" | tail -n 30 || true
  echo "$output" | head -n 2 | sed "s/^/# /" >&3 # the measured numbers, also when it passes
  [ "$status" -eq 0 ]
  [ "$(find "$T/scratch/n1/job_77/d" -type f | wc -l)" -eq 10000 ]
  [ "$(cat "$T/scratch/n1/job_77/d/f01234")" = 4 ]
}

@test "the cache holds at most cache_max_entries: least recently used entries no running job uses go" {
  printf 'cache_max_entries = 3\n' >>"$T/stagehand.toml"
  make_sources 6 1
  start_daemon
  run python3 -c '
import sys
from client import cache, end, register, settled, source, stage
register(77)
r = stage(77, [source(sys.argv[1], "f%05d" % i) for i in range(3)]); assert r["ok"], r
print("full:", settled(3)["entries"])
end(77) # its entries are no longer pinned
register(78)
r = stage(78, [source(sys.argv[1], "f%05d" % i) for i in range(3, 6)]); assert r["ok"], r
print("outcomes:", [s["cache"] for s in r["staged"]])
print("after:", settled()["entries"])
' "$T/src"
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"full: 3"* ]]
  [[ "$output" == *"outcomes: ['cache miss', 'cache miss', 'cache miss']"* ]]
  [[ "$output" == *"after: 3"* ]]
  grep -Eq "cache: evicted $T/src/f0000[0-2] " "$T/daemon.log" # job 77's (used in the same second: any of them)
}

@test "entries a running job pins never push the cache past cache_max_bytes: the excess is delivered, not cached, and counted" {
  printf 'cache_max_bytes = "100K"\n' >>"$T/stagehand.toml"
  make_sources 4 40000 # 44 KiB on disk each, with its manifest: two fit
  start_daemon
  run python3 -c '
import sys
from client import cache, register, settled, source, stage
register(77)
r = stage(77, [source(sys.argv[1], "f%05d" % i) for i in range(2)]); assert r["ok"], r
settled(2)
register(78) # a running job whose files are the entries (hits are linked): they are pinned
r = stage(78, [source(sys.argv[1], "f%05d" % i) for i in range(2)]); assert r["ok"], r
print("pinned:", [s["cache"] for s in r["staged"]])
r = stage(78, [source(sys.argv[1], "f%05d" % i, "e/f%05d" % i) for i in range(2, 4)]); assert r["ok"], r
for s in r["staged"]: print(s["shown"], s["cache"], s["bytes"])
# (both fills are dropped after their replies, in the fill thread: under load the second may not
# have started when the cache first looks settled, so wait for it, at most 60 s)
import time
deadline = time.monotonic() + 60
c = settled()
while c["fills_dropped"] < 2 and time.monotonic() < deadline:
    c = settled()
print("cache:", c["entries"], "entries", c["bytes"], "of", c["max_bytes"], "bytes;", c["fills_dropped"], "not cached")
assert c["bytes"] <= c["max_bytes"]
' "$T/src"
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"pinned: ['cache hit', 'cache hit']"* ]]
  [[ "$output" == *"f00002 cache miss 40000"* ]]
  [[ "$output" == *"f00003 cache miss 40000"* ]]
  [[ "$output" == *"cache: 2 entries"*"2 not cached"* ]]
  grep -q "f00003: not cached (the node cache is full of entries running jobs use)" "$T/daemon.log"
  [ "$(cat "$T/scratch/n1/job_78/e/f00003" | wc -c)" -eq 40000 ] # the job has its data all the same
}

@test "[stage] max_bytes counts every request of a job, not each request alone" {
  printf '[stage]\nmax_bytes = "100K"\n' >>"$T/stagehand.toml"
  make_sources 3 40000
  start_daemon
  run python3 -c '
import sys
from client import register, source, stage
register(77)
for i in range(3): # three requests of one job: 120,000 bytes in all
    r = stage(77, [source(sys.argv[1], "f%05d" % i)])
    print(i, r["ok"], r.get("kind", ""), r.get("error", ""))
' "$T/src"
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"0 True"* ]]
  [[ "$output" == *"1 True"* ]]
  [[ "$output" == *"2 False limit --stage-data: f00002: "*"staged 80000 bytes on node n1 through the daemon already, and [stage] max_bytes (102400) counts all of a job's stagings"* ]]
  [ ! -e "$T/scratch/n1/job_77/d/f00002" ] # nothing of the refused request is left
  # The daemon's log says so too, as news (the job's limit), not as a warning of the daemon's own.
  grep -E "^info: job 77: --stage-data: f00002: .*counts all of a job's stagings" "$T/daemon.log"
  ! grep -E "^(warning|error): job 77: --stage-data" "$T/daemon.log" || false
}

@test "a staging the node fails (the job's scratch full) is a warning in the daemon's log, and leaves nothing" {
  # The node's side, not the job's asking: an admin's journal shows it as a warning (the job's
  # helper then stages without the daemon, and meets the same full disk itself).
  make_sources 1 2000000
  mount -t tmpfs -o size=1m,mode=0755 stagehand-full "$T/scratch/n1"
  mkdir "$T/scratch/n1/job_77"
  chown 4242:4242 "$T/scratch/n1/job_77"
  chmod 0700 "$T/scratch/n1/job_77"
  start_daemon
  run python3 -c '
import sys
from client import register, source, stage
register(77)
r = stage(77, [source(sys.argv[1], "f00000")])
print(r["ok"], r.get("kind", ""), r.get("error", ""))
' "$T/src"
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == "False io --stage-data: f00000: "*"No space left on device"* ]]
  [ -z "$(ls -A "$T/scratch/n1/job_77")" ] # nothing of it is left in the job's directory
  grep -E "^warning: job 77: --stage-data: f00000: .*No space left on device" "$T/daemon.log"
}

@test "a worker thread that cannot start (the cgroup's task limit) answers busy; the daemon goes on" {
  # The pids controller (cgroup v1 here: /sys/fs/cgroup/pids; v2: the unified hierarchy's pids.max).
  local cg
  if [ -d /sys/fs/cgroup/pids ]; then
    cg=/sys/fs/cgroup/pids/stagehand-limits.$$
  elif grep -qw pids /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    cg=/sys/fs/cgroup/stagehand-limits.$$
  else
    echo "no pids cgroup controller on this machine: cannot hold the daemon's task count" >&2
    false
  fi
  start_daemon
  mkdir "$cg"
  echo "$DAEMON" >"$cg/cgroup.procs"
  # No task more than it has: the next request's worker thread cannot start.
  cat "$cg/pids.current" >"$cg/pids.max"
  run python3 -c '
from client import call
r = call({"v": 1, "op": "status"}, timeout=20)
print(r.get("ok"), r.get("kind"), r.get("error"))
'
  echo "$output"
  echo max > "$cg/pids.max"
  echo "$DAEMON" >"$(dirname "$cg")/cgroup.procs"
  rmdir "$cg"
  [ "$status" -eq 0 ]
  [[ "$output" == "False limit the daemon is busy (it cannot start more work now)" ]]
  kill -0 "$DAEMON" # still running
  grep -q "cannot start a worker thread" "$T/daemon.log"
  # And it serves again once it can.
  run python3 -c '
from client import call
print(call({"v": 1, "op": "status"}, timeout=20).get("ok"))
'
  [ "$output" = True ]
}

@test "stagehand prolog (a Prolog= script) tells the daemon whether the job was submitted with --stage-data" {
  start_daemon
  # slurmd's environment for a Prolog= script: the job control variables with SPANK_, no option
  # variable (slurmd clears those before the script). The plugin's sbatch side sets this one for
  # --stage-data; a job that asked for none has none. (The daemon waits a moment at a cache view
  # for jobs it was told will stage: a job told wrongly makes others wait for nothing.)
  export SLURM_JOB_UID=4242 SLURM_JOB_GID=4242 SLURMD_NODENAME=n1
  SLURM_JOB_ID=91 SPANK_STAGEHAND_STAGE_DATA_ASKED=1 "$STAGEHAND_BIN" prolog --config "$T/stagehand.toml"
  SLURM_JOB_ID=92 "$STAGEHAND_BIN" prolog --config "$T/stagehand.toml"
  [ -d "$T/scratch/n1/job_91" ]
  [ -d "$T/scratch/n1/job_92" ]
  cat "$T/daemon.log"
  [ "$(grep -c "job 91: registered (uid 4242)$" "$T/daemon.log")" -eq 1 ]
  [ "$(grep -c "job 92: registered (uid 4242, no --stage-data)$" "$T/daemon.log")" -eq 1 ]
}

@test "a reload that hangs (cache_dir moved onto a filesystem that stopped answering) holds up no request" {
  start_stuckfs
  make_sources 1 10
  start_daemon
  reload_into_stuckfs
  # Requests go on meanwhile: status answers, and a job's staging goes through the cache in use.
  run timeout -s KILL 300 python3 -c '
from client import call
print("status:", call({"v": 1, "op": "status"}, timeout=120).get("ok"))'
  [ "$output" = "status: True" ]
  run stage_first_source 77
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"staged: ['cache miss']"* ]]
  [ "$(cat "$T/scratch/n1/job_77/d/f00000")" = 0000000000 ]
  # A second SIGHUP meanwhile follows the one held, and says so.
  kill -HUP "$DAEMON"
  for _ in $(seq 1 300); do grep -q "reload: the one before has run for" "$T/daemon.log" && break; sleep 0.1; done
  grep -q "reload: the one before has run for .* s; this one follows it" "$T/daemon.log"
  # The server goes: the reload fails, says so, and the daemon keeps the cache it had. So does the
  # one that follows it, on the dead mount (detached sooner, it could find a plain directory there
  # and make a new cache in it: seen once under the sanitizers).
  kill_stuckfs
  for _ in $(seq 1 300); do [ "$(grep -c "reload: \[daemon\] cache_dir" "$T/daemon.log")" -ge 2 ] && break; sleep 0.1; done
  stop_stuckfs
  cat "$T/daemon.log"
  grep -q "reload: \[daemon\] cache_dir" "$T/daemon.log"
  # Its last line says which key did not take and what the daemon kept, never a plain "reloaded".
  grep -Eq "reloaded $T/stagehand.toml, except \[daemon\] cache_dir \(the cache stays at $T/cache/[^ ]+\)$" \
    "$T/daemon.log"
  ! grep -Eq "reloaded $T/stagehand.toml$" "$T/daemon.log" || false
  run stage_first_source 78 settled
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"staged: ['cache hit']"* ]]
}

# The cache made as usual (job 77's miss of f00000: one entry), then the daemon started again with
# that cache shown through hangingdisk.py, not hanging yet (GC's timed passes off: they would meet
# the hung disk too). Arguments: the daemon's wrapper (start_daemon).
cache_on_a_hanging_disk() {
  make_sources 2 10 # (f00001: never cached)
  start_daemon
  run stage_first_source 77
  [ "$status" -eq 0 ]
  [[ "$output" == *"staged: ['cache miss']"* ]]
  python3 -c 'from client import settled; assert settled(1)["entries"] == 1'
  kill "$DAEMON"
  wait "$DAEMON" || true
  start_hangingdisk
  sed -i -e "s|^cache_dir = .*|cache_dir = \"$T/hcache/%n\"|" -e 's|^gc_interval = .*|gc_interval = "1h"|' \
    "$T/stagehand.toml"
  mkdir "$T/scratch/n1/job_79"
  chown 4242:4242 "$T/scratch/n1/job_79"
  chmod 0700 "$T/scratch/n1/job_79"
  start_daemon "$@"
  grep -q "cache $T/hcache/n1 " "$T/daemon.log"
}

# Then the disk stops answering: job 78's staging of f00000 waits in the kernel in its lookup, with
# the node's lock (in the background as $FIRST, its answer in $T/first.out once the server goes).
# Returns once the lock is seen held: a status asked then is not answered in 3 s. An end_job asked
# at the same moment is answered (its kick of GC does not wait for the lock; the pass it starts
# does). Arguments: as above.
# With the disk hung: job $1 stages f00000 in the background ($FIRST, its answer in $T/first.out
# once the server goes or answers again). Its lookup of the entry waits in the kernel (a getattr
# of entries/ on its way) with the node's lock; returns once it is seen held there.
lookup_holds_the_lock() {
  timeout -s KILL 120 python3 -c '
import sys
from client import register, source, stage
register(int(sys.argv[2]))
r = stage(int(sys.argv[2]), [source(sys.argv[1], "f00000")], timeout=100)
print("first:", r.get("ok"), r.get("kind", ""), r.get("error", ""))
' "$T/src" "$1" >"$T/first.out" 2>&1 &
  FIRST=$!
  local held="^hung [a-z]+ /n1/entries"
  for _ in $(seq 1 600); do grep -Eq "$held" "$T/hangingdisk.log" 2>/dev/null && break; sleep 0.1; done
  cat "$T/hangingdisk.log"
  grep -Eq "$held" "$T/hangingdisk.log"
}

hang_a_staging_on_the_cache() {
  cache_on_a_hanging_disk "$@"
  touch "$T/hang-now"
  # Job 78's lookup holds the lock: a status asked now is not answered in 3 s either (one asked
  # 5 s on is answered at once, without it).
  lookup_holds_the_lock 78
  run timeout -s KILL 60 python3 -c '
import threading
from client import call
said = {}
def probe():
    try:
        r = call({"v": 1, "op": "status"}, timeout=3)
        said["status"] = "answered: %s %s" % (r.get("ok"), r.get("error", ""))
    except TimeoutError:
        said["status"] = "waits"
t = threading.Thread(target=probe); t.start()
r = call({"v": 1, "op": "end_job", "job_id": 77, "trash": "", "keep_until": 0}, timeout=10)
t.join()
print("end_job:", r.get("ok"))
print(said["status"])'
  echo "$output"
  [ "${lines[0]}" = "end_job: True" ]
  [[ "${lines[1]}" == "waits" || "${lines[1]}" == "answered: False the node cache has not answered for "* ]]
}

@test "a directory whose read fails on the share (EIO) is answered io, which the job's helper stages without the daemon, not corrupt" {
  # The reader (the job user's) streams the tree to the tee and the job's unpacking: a read that
  # fails cuts the stream short, and the unpacking then calls it a truncated archive. "corrupt"
  # fails the job (staging again would read the same bytes); what failed is the share.
  start_stuckfs
  make_sources 1 10
  start_daemon
  run timeout -s KILL 120 python3 -c '
import sys
from client import register, stage
register(78)
r = stage(78, [{"shown": "bad", "path": sys.argv[1], "dest": "d/bad", "kind": "dir", "unpack": "never"}], timeout=60)
print("answered:", r.get("ok"), r.get("kind", ""), r.get("error", ""))' "$T/stuck/bad"
  echo "$output"
  cat "$T/daemon.log"
  [[ "$output" == "answered: False io "*"eio.bin"*"Input/output error"* ]]
  [ ! -e "$T/scratch/n1/job_78/d/bad" ]
}

@test "a stage answer that does not match the request (a source left out) is not believed: the helper stages every source" {
  # A daemon (here a stand-in on its socket, root's) that answers "ok" for the first of two sources
  # only: the job would run without the second, its staging marked done.
  cat >"$T/fake.py" <<'PY'
import json, os, socket, struct, sys
l = socket.socket(socket.AF_UNIX); l.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o666); l.listen(4)
c, _ = l.accept()
n = struct.unpack(">I", c.recv(4))[0]; data = b""
while len(data) < n: data += c.recv(n - len(data))
src = json.loads(data)["sources"][0]
reply = {"v": 1, "type": "result", "ok": True, "staged": [{"shown": src["shown"], "dest": src["dest"], "how": "copied",
         "files": 1, "bytes": 2, "seconds": 0.0, "cache": "cache miss", "note": ""}]}
b = json.dumps(reply).encode(); c.sendall(struct.pack(">I", len(b)) + b); c.close()
PY
  make_sources 2 1
  mkdir -p "$T/run" "$T/job5"
  timeout -s KILL 60 python3 "$T/fake.py" "$T/run/fake.sock" &
  local fake=$!
  for _ in $(seq 1 100); do [ -S "$T/run/fake.sock" ] && break; sleep 0.1; done
  run timeout -s KILL 60 "$STAGEHAND_BIN" stage-run --tmpdir "$T/job5" --node n1 --max-bytes 1000000 --job 5 \
    --socket "$T/run/fake.sock" --progress-interval 0 -- "$T/src/f00000:a,$T/src/f00001:b"
  echo "$output"
  wait "$fake" || true
  [ "$status" -eq 0 ]
  [[ "${lines[0]}" == *"the node daemon could not stage (the node daemon answered for 1 sources, not the 2 asked);"* ]]
  [ "$(cat "$T/job5/a")" = 0 ]
  [ "$(cat "$T/job5/b")" = 1 ]
}

@test "a staging whose client gave up (the daemon silent too long) leaves what the job staged itself since alone" {
  # The job's helper stops waiting for a silent daemon (60 s without a frame), removes what the
  # daemon had placed and stages the same names itself. The daemon's request, when it goes on,
  # must not take those away (its rollback removed its names blindly), nor place anything more.
  start_stuckfs
  make_sources 1 10
  start_daemon
  run stage_first_source 77
  [ "$status" -eq 0 ]
  python3 -c 'from client import settled; assert settled(1)["entries"] == 1'
  # Job 78: f00000 (a hit, placed at once), then a file whose every read hangs; the client stops
  # waiting after 3 s, as the helper does after its 60.
  run timeout -s KILL 60 python3 -c '
import sys
from client import register, source, stage
register(78)
try:
    r = stage(78, [source(sys.argv[1], "f00000"), source(sys.argv[2], "stuck.bin")], timeout=3)
    print("answered:", r)
except TimeoutError:
    print("gave up")' "$T/src" "$T/stuck/data"
  echo "$output"
  [ "$output" = "gave up" ]
  [ "$(cat "$T/scratch/n1/job_78/d/f00000")" = 0000000000 ] # the daemon's hit
  # The helper's own staging, as the job user: what the daemon placed removed (the hung file's
  # destination too), then its own copy of f00000.
  setpriv --reuid 4242 --regid 4242 --clear-groups sh -c \
    'rm -rf "$1/d/f00000" "$1/d/stuck.bin" && echo mine >"$1/d/f00000"' sh "$T/scratch/n1/job_78"
  # The daemon notices (its next keepalive finds nobody) and ends the request; the hung read's
  # child is left behind (a FUSE read SIGKILL cannot end).
  for _ in $(seq 1 300); do grep -q "job 78: " "$T/daemon.log" && grep -Eq "job 78: .*(went away|gave up)" \
    "$T/daemon.log" && break; sleep 0.1; done
  cat "$T/daemon.log"
  grep -Eq "job 78: .*(went away|gave up)" "$T/daemon.log"
  sleep 1
  [ "$(cat "$T/scratch/n1/job_78/d/f00000")" = mine ]
  [ ! -e "$T/scratch/n1/job_78/d/stuck.bin" ]
}

@test "a staging under way keeps its client answered while a hung cache disk holds the node lock" {
  # Its keepalives (every 5 s) used to take the node's lock: held by a lookup that waits in the
  # kernel, they stopped, and the job's helper gave up on a staging that was still going.
  start_stuckfs
  cache_on_a_hanging_disk
  mkdir "$T/scratch/n1/job_80"
  chown 4242:4242 "$T/scratch/n1/job_80"
  chmod 0700 "$T/scratch/n1/job_80"
  # Job 80 reads a file whose every read hangs (a miss: it waits on its reader child, sending
  # keepalives); the time of each frame it gets is a line of $T/frames.
  timeout -s KILL 120 python3 -c '
import json, socket, struct, sys, time
from client import SOCK, register
register(80)
req = {"v": 1, "op": "stage", "job_id": 80, "max_bytes": 1 << 40,
       "sources": [{"shown": "stuck.bin", "path": sys.argv[1], "dest": "d/stuck.bin", "kind": "file",
                    "unpack": "never"}]}
s = socket.socket(socket.AF_UNIX); s.settimeout(60); s.connect(SOCK)
b = json.dumps(req).encode(); s.sendall(struct.pack(">I", len(b)) + b)
with open(sys.argv[2], "a", buffering=1) as out:
    while True:
        head = s.recv(4)
        if len(head) < 4: break
        n = struct.unpack(">I", head)[0]; data = b""
        while len(data) < n: data += s.recv(n - len(data))
        out.write("%.3f %s\n" % (time.time(), json.loads(data).get("type", "result")))
' "$T/stuck/data/stuck.bin" "$T/frames" >"$T/frames.out" 2>&1 &
  for _ in $(seq 1 300); do grep -q "^hung read /data/stuck.bin" "$T/stuckfs.log" 2>/dev/null && break; sleep 0.1; done
  grep -q "^hung read /data/stuck.bin" "$T/stuckfs.log"
  # The cache's disk stops answering, with the node's lock held (job 78's lookup).
  touch "$T/hang-now"
  lookup_holds_the_lock 78
  local held
  held=$(date +%s.%N)
  sleep 16
  cat "$T/frames"
  # Job 80's keepalives go on (one every 5 s): two at least in those 16 s.
  [ "$(awk -v t="$held" '$1 > t + 0.2 && $2 == "progress"' "$T/frames" | wc -l)" -ge 2 ]
  stop_hangingdisk
  wait "$FIRST" || true
}

@test "a hit found after its client gave up (its lookup held by a cache disk that hung a while) is not placed" {
  cache_on_a_hanging_disk
  touch "$T/hang-now"
  # The client gives up once the lookup is held there (as the helper does after 60 s of silence).
  run timeout -s KILL 60 python3 -c '
import json, re, socket, struct, sys, time
from client import SOCK, register, source
register(78)
s = socket.socket(socket.AF_UNIX); s.connect(SOCK)
b = json.dumps({"v": 1, "op": "stage", "job_id": 78, "max_bytes": 1 << 40,
                "sources": [source(sys.argv[1], "f00000")]}).encode()
s.sendall(struct.pack(">I", len(b)) + b)
for _ in range(600):
    try:
        if re.search(r"^hung [a-z]+ /n1/entries", open(sys.argv[2]).read(), re.M): break
    except FileNotFoundError: pass
    time.sleep(0.1)
s.close()
print("gave up")' "$T/src" "$T/hangingdisk.log"
  echo "$output"
  [ "$output" = "gave up" ]
  grep -Eq "^hung [a-z]+ /n1/entries" "$T/hangingdisk.log"
  # The job's helper stages f00000 itself now; the disk answers again, and the daemon's lookup
  # finds the entry: the daemon places nothing (the helper's copy would then meet an existing
  # destination and fail the job).
  touch "$T/resume-now"
  for _ in $(seq 1 300); do grep -q "job 78: .*went away" "$T/daemon.log" && break; sleep 0.1; done
  cat "$T/daemon.log"
  grep -q "warning: job 78: --stage-data: f00000: the client went away" "$T/daemon.log"
  [ ! -e "$T/scratch/n1/job_78/d" ]
  grep -q "^resumed " "$T/hangingdisk.log"
}

@test "a miss reached after its client gave up (waiting for the node lock a hung cache disk held) is not delivered" {
  cache_on_a_hanging_disk
  mkdir "$T/scratch/n1/job_81"
  chown 4242:4242 "$T/scratch/n1/job_81"
  chmod 0700 "$T/scratch/n1/job_81"
  touch "$T/hang-now"
  # Job 81's lookup of f00000 holds the node lock in the kernel; job 78 asks for f00001 (a miss)
  # meanwhile and waits for that lock; its client gives up 2 s on (as the helper does after 60 s).
  lookup_holds_the_lock 81
  run timeout -s KILL 60 python3 -c '
import sys
from client import register, source, stage
register(78)
try:
    print("answered:", stage(78, [source(sys.argv[1], "f00001")], timeout=2))
except TimeoutError:
    print("gave up")' "$T/src"
  echo "$output"
  [ "$output" = "gave up" ]
  # The disk answers again: job 81's lookup ends, and job 78's request has the lock: its miss is
  # not read into the job's directory (the request stops at its next look at the client: before
  # its source, or before its read).
  touch "$T/resume-now"
  for _ in $(seq 1 300); do grep -q "job 78: .*went away" "$T/daemon.log" && break; sleep 0.1; done
  cat "$T/daemon.log"
  grep -Eq "warning: job 78: --stage-data: (the client went away before f00001|f00001: the client went away)" \
    "$T/daemon.log"
  [ ! -e "$T/scratch/n1/job_78/d" ]
  wait "$FIRST" || true
}

@test "a cache disk that stops answering: once the node lock has been out of reach 5 s, requests are answered at once" {
  # The cache made as usual: one entry. Then the same cache shown through a FUSE server, as a disk
  # that then stops answering: the next lookup of that entry waits in the kernel, with the node's
  # lock held. Before the watch, every request after it waited too (each job's task start its 15 s).
  hang_a_staging_on_the_cache
  sleep 4 # the lock's patience (5 s) past: held 3 s before the status above gave up, 7 s now
  # Job 79's staging, status and a cache listing are answered, each within 10 s (at once: they no
  # longer wait on the lock), with what a client falls back on.
  run timeout -s KILL 60 python3 -c '
import sys
from client import call, register, source, stage
register(79)
r = stage(79, [source(sys.argv[1], "f00000")], timeout=10)
print("stage:", r.get("ok"), r.get("kind", ""), r.get("error", ""))
for op in ("status", "cache_ls"):
    r = call({"v": 1, "op": op}, timeout=10)
    print(op + ":", r.get("ok"), r.get("kind", ""), r.get("error", ""))
' "$T/src"
  echo "$output"
  [ "$status" -eq 0 ]
  local said="s (its disk, or a filesystem it reads, hangs); the daemon serves nothing that needs it until it does"
  [[ "$output" == *"stage: False io the node cache has not answered for "*" $said"* ]]
  [[ "$output" == *"status: False io the node cache has not answered for "* ]]
  [[ "$output" == *"cache_ls: False io the node cache has not answered for "* ]]
  [ -z "$(ls -A "$T/scratch/n1/job_79")" ] # nothing of job 79's staging is left
  [ "$(grep -c "warning: the node cache's lock has been held for" "$T/daemon.log")" -eq 1 ] # said once
  # The disk comes back (here: its server goes, and the held lookup fails): the lock is had again,
  # the log says so, and requests are served again.
  stop_hangingdisk
  wait "$FIRST" || true
  cat "$T/first.out"
  [[ "$(cat "$T/first.out")" == "first: "* ]]
  for _ in $(seq 1 100); do grep -q "the node cache answers again" "$T/daemon.log" && break; sleep 0.1; done
  cat "$T/daemon.log"
  grep -Eq "info: the node cache answers again: its lock was had after [0-9]+ s; [34] requests were answered" \
    "$T/daemon.log"
  run timeout -s KILL 60 python3 -c '
from client import call
print("status:", call({"v": 1, "op": "status"}, timeout=10).get("ok"))'
  [ "$output" = "status: True" ]
}

@test "a user's request that finds every turn held by requests a hung cache disk holds is answered at once, not busy" {
  # Under 200 open files the daemon takes 2 requests at once (service::limits_within): job 78's
  # staging and the status that proved the lock held take both, in the kernel. (The end_job asked
  # meanwhile ended: its kick of GC does not wait for the lock.)
  hang_a_staging_on_the_cache prlimit --nofile=200:200 --
  grep -q "requests at once: 2, " "$T/daemon.log"
  [ "${lines[1]}" = waits ] # (the status holds the second turn: asked within the lock's first 5 s)
  sleep 4 # the lock's patience (5 s) past
  # A user's status would wait for a turn (queue_wait, 10 s) and then be answered busy; the daemon
  # cannot serve it anyway, and says so at once.
  run timeout -s KILL 60 setpriv --reuid 4242 --regid 4242 --clear-groups /usr/bin/python3 -c '
from client import call
r = call({"v": 1, "op": "status"}, timeout=30)
print("status:", r.get("ok"), r.get("kind", ""), r.get("error", ""))'
  echo "$output"
  [[ "$output" == "status: False io the node cache has not answered for "* ]]
  grep -q "a status request of uid 4242 is answered without waiting for its turn: the node cache has not" \
    "$T/daemon.log"
  ! grep -q "uid 4242 waits for a turn" "$T/daemon.log" || false
  stop_hangingdisk
  wait "$FIRST" || true
}

@test "SIGTERM while a cache disk hangs with the node lock: the daemon leaves within its 10 s, saying why" {
  hang_a_staging_on_the_cache
  sleep 4 # the lock out of reach past its patience
  kill -TERM "$DAEMON"
  # Requests in progress get 10 s; the one in the kernel is then left to end with the process, and
  # nothing is torn down under it.
  for _ in $(seq 1 600); do grep -q "stopped (" "$T/daemon.log" && break; sleep 0.1; done
  cat "$T/daemon.log"
  grep -Eq "stopped \([12] requests cut short, the node cache not answering\)" "$T/daemon.log" # (78, the status; not the end_job)
  [ ! -e "$T/run/n1.sock" ]
  gone_once_the_server_is stop_hangingdisk
  wait "$FIRST" || true
}

@test "a reload that changes keys read only at start names them in its last line, and the daemon goes on as it was" {
  start_daemon
  sed -i -e "s|^socket = .*|socket = \"$T/run2/%n.sock\"|" -e "s|^state_dir = .*|state_dir = \"$T/state2/%n\"|" \
    -e "s|^base = .*|base = \"$T/scratch2/%n\"|" "$T/stagehand.toml"
  kill -HUP "$DAEMON"
  for _ in $(seq 1 300); do grep -q "reloaded $T/stagehand.toml" "$T/daemon.log" && break; sleep 0.1; done
  cat "$T/daemon.log"
  grep -Eq "reloaded $T/stagehand.toml, except \[daemon\] socket \(until the next restart\) and \[daemon\] state_dir \(until the next restart\) and \[tmpdir\] base \(until the next restart\)$" \
    "$T/daemon.log"
  # Still on the socket it started with, its registry in the state directory it started with.
  run timeout -s KILL 120 python3 -c '
from client import call, register
register(79)
print("status:", call({"v": 1, "op": "status"}).get("ok"))'
  [ "$output" = "status: True" ]
  [ ! -e "$T/state2" ]
  [ ! -e "$T/run2" ]
}

@test "SIGTERM while a reload hangs: the daemon stops serving within its 10 s, and is gone once the filesystem is" {
  start_stuckfs
  start_daemon
  reload_into_stuckfs
  kill -TERM "$DAEMON"
  # Requests in progress and the reload get 10 s; the reload is then left to end with the process.
  for _ in $(seq 1 600); do grep -q "a reload left unfinished" "$T/daemon.log" && break; sleep 0.1; done
  cat "$T/daemon.log"
  grep -q "stopped (0 requests cut short, a reload left unfinished)" "$T/daemon.log"
  [ ! -e "$T/run/n1.sock" ]
  # Its thread in the FUSE request holds the process until the server goes (the kernel's doing).
  gone_once_the_server_is stop_stuckfs
}
