#!/usr/bin/env bash
# Checks tests/tools/sharedfs.py, the cluster tests' shared-filesystem stand-in, without Slurm:
# passthrough content, the kernel's permission checks for another user (nobody), read-only, the
# counts in .sharedfs-stats (direct_io: a second read counts again), the shared --mbps budget and
# --open-latency-ms, and the holds (--hold-opens, --hold-reads). Needs root, /dev/fuse, fusermount, runuser and Debian's fuse, libfuse2 and
# python3-fusepy. Prints one line; exits non-zero on failure. (ctest: `sharedfs`, label unit.)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
sharedfs=${STAGEHAND_SHAREDFS:-$here/sharedfs.py}
python=/usr/bin/python3
user=nobody

fail() { echo "sharedfs test: FAILED: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || fail "must run as root (it mounts FUSE with allow_other and reads as $user); CI runs it as root"
[ -c /dev/fuse ] || fail "no /dev/fuse (a container needs --device /dev/fuse and CAP_SYS_ADMIN)"
command -v fusermount >/dev/null || fail "no fusermount (apt-get install fuse)"
id -u "$user" >/dev/null 2>&1 || fail "no user $user to read as"
"$python" -c 'import fusepy' 2>/dev/null || "$python" -c 'import fuse' 2>/dev/null ||
  fail "$python cannot import fusepy (apt-get install python3-fusepy libfuse2)"

T=$(mktemp -d "${TMPDIR:-/tmp}/sharedfs-test.XXXXXX")
chmod 0755 "$T" # nobody must reach the mount point
runuser -u "$user" -- test -x "$T" || { rm -rf "$T"; fail "$user cannot reach $T (set TMPDIR to a directory others may enter)"; }
pids=()
mounts=()
cleanup() {
  for m in "${mounts[@]}"; do fusermount -u "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$T"
}
trap cleanup EXIT

# mount SRC MOUNT [ARGS...]: starts sharedfs in the background and waits for its stats file.
mount_fs() {
  local src=$1 mnt=$2
  shift 2
  mkdir -p "$mnt"
  "$python" "$sharedfs" "$src" "$mnt" "$@" >"$T/$(basename "$mnt").log" 2>&1 &
  pids+=("$!")
  mounts+=("$mnt")
  for _ in $(seq 1 100); do [ -e "$mnt/.sharedfs-stats" ] && return 0; sleep 0.1; done
  cat "$T/$(basename "$mnt").log"
  fail "sharedfs did not mount $mnt within 10 s"
}
stat_of() { # MOUNT PYTHON-EXPRESSION-ON-d
  "$python" -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1/.sharedfs-stats"
}
now() { date +%s%N; }
ms_since() { echo $((($(now) - $1) / 1000000)); }

src=$T/src
mkdir -p "$src/sub"
head -c 1000000 /dev/urandom >"$src/public.bin"
echo secret >"$src/private.txt"
echo nested >"$src/sub/f"
ln -s public.bin "$src/link"
chmod 0755 "$src" "$src/sub"
chmod 0644 "$src/public.bin" "$src/sub/f"
chmod 0600 "$src/private.txt"

# 1. Unlimited: content, permissions, read-only, counts.
m=$T/plain
mount_fs "$src" "$m"
cmp -s "$src/public.bin" "$m/public.bin" || fail "root: content differs"
runuser -u "$user" -- cat "$m/public.bin" | cmp -s "$src/public.bin" - || fail "$user: 0644 file not readable or differs"
[ "$(runuser -u "$user" -- cat "$m/sub/f")" = nested ] || fail "$user: nested file"
[ "$(readlink "$m/link")" = public.bin ] || fail "symlink not passed through"
if runuser -u "$user" -- cat "$m/private.txt" >/dev/null 2>&1; then fail "$user read a 0600 file of root's"; fi
[ "$(cat "$m/private.txt")" = secret ] || fail "root: 0600 file"
# One open, read twice: without direct_io the second read would come from the page cache.
"$python" -c 'import os,sys; f=os.open(sys.argv[1], os.O_RDONLY); [os.pread(f, 1 << 20, 0) for _ in range(2)]' "$m/sub/f"
if (echo x >>"$m/public.bin") 2>/dev/null; then fail "a write went through"; fi
if (echo x >"$m/new") 2>/dev/null; then fail "a create went through"; fi
[ -n "$(find "$m" -maxdepth 1 -name .sharedfs-stats)" ] || fail "no .sharedfs-stats in the root listing"
# root: public 1000000 + private 7 + nested 2 x 7; nobody: public 1000000 + nested 7; the
# refused open counts nothing.
[ "$(stat_of "$m" "d['bytes_read']")" = 2000028 ] || fail "bytes_read $(stat_of "$m" "d['bytes_read']"), expected 2000028"
[ "$(stat_of "$m" "d['files']['/sub/f']")" = 21 ] || fail "a re-read within one open was not counted (page cache?): $(stat_of "$m" "d['files']")"
[ "$(stat_of "$m" "d['files']['/public.bin']")" = 2000000 ] || fail "per-file bytes: $(stat_of "$m" "d['files']")"
[ "$(stat_of "$m" "d['opens']")" = 5 ] || fail "opens $(stat_of "$m" "d['opens']"), expected 5"
[ "$(stat_of "$m" "d['file_opens']['/public.bin']")" = 2 ] || fail "per-file opens: $(stat_of "$m" "d['file_opens']")"
[ "$(stat_of "$m" "sum(r['bytes_read'] for r in d['readers'].values() if r['uid'] == 65534)")" = 1000007 ] ||
  fail "per-reader bytes: $(stat_of "$m" "d['readers']")"
fusermount -u "$m" || fail "fusermount -u $m"

# 2. --mbps 10 shared by two readers, --open-latency-ms 200: 2 x 2.5 MB take 0.5 s + 0.2 s.
head -c 2500000 /dev/urandom >"$src/a.bin"
cp "$src/a.bin" "$src/b.bin"
chmod 0644 "$src/a.bin" "$src/b.bin"
m=$T/slow
mount_fs "$src" "$m" --mbps 10 --open-latency-ms 200
t0=$(now)
cat "$m/a.bin" >/dev/null &
reader=$!
runuser -u "$user" -- cat "$m/b.bin" >/dev/null
wait "$reader"
both=$(ms_since "$t0")
t0=$(now)
cat "$m/sub/f" >/dev/null
small=$(ms_since "$t0")
[ "$(stat_of "$m" "d['bytes_read']")" = 5000007 ] || fail "throttled bytes_read $(stat_of "$m" "d['bytes_read']")"
fusermount -u "$m" || fail "fusermount -u $m"
# Lower bounds only (a loaded machine makes anything slower, never faster): one budget for both
# readers (2 x 2.5 MB at 10 MB/s: 500 ms; a budget per reader would take 250 ms) and the delay
# on each open.
[ "$both" -ge 550 ] || fail "two readers of 2.5 MB at 10 MB/s shared took $both ms, expected at least 550"
[ "$small" -ge 190 ] || fail "an open with 200 ms latency took $small ms"

# 3. Holds: an open waits while its gate exists; a read through an open file that has delivered
# --hold-reads-from bytes waits while its own gate exists, the bytes before that get through, at
# any offset. Removing the gate lets them go on.
m=$T/held
mount_fs "$src" "$m" --hold-opens "$T/gate-opens" --hold-reads "$T/gate-reads" --hold-reads-from 100000
touch "$T/gate-opens"
cat "$m/public.bin" >"$T/held-open.out" &
opener=$!
sleep 0.5
kill -0 "$opener" 2>/dev/null || fail "an open went through its gate"
[ "$(stat_of "$m" "d['opens']")" = 0 ] || fail "an open was counted while held"
rm "$T/gate-opens"
wait "$opener" || fail "a held open failed once let go"
cmp -s "$src/public.bin" "$T/held-open.out" || fail "a held open read other bytes"
touch "$T/gate-reads"
"$python" -c '
import os, sys
f = os.open(sys.argv[1], os.O_RDONLY)
print(len(os.pread(f, 60000, 0)) + len(os.pread(f, 40000, 960000)), flush=True)
print(len(os.pread(f, 1000000, 60000)), flush=True)' "$m/public.bin" >"$T/held-read.out" &
reader=$!
for _ in $(seq 1 100); do [ -s "$T/held-read.out" ] && break; sleep 0.1; done
[ "$(head -n1 "$T/held-read.out")" = 100000 ] || fail "the first 100000 bytes (head and tail) did not get through a read hold"
sleep 0.5
kill -0 "$reader" 2>/dev/null || fail "a read past --hold-reads-from went through its gate"
[ "$(stat_of "$m" "d['bytes_read']")" = 1100000 ] || fail "held reads counted: $(stat_of "$m" "d['bytes_read']")"
rm "$T/gate-reads"
wait "$reader" || fail "a held read failed once let go"
[ "$(sed -n 2p "$T/held-read.out")" = 940000 ] || fail "a held read returned $(sed -n 2p "$T/held-read.out") bytes"
fusermount -u "$m" || fail "fusermount -u $m"

echo "sharedfs test: ok (passthrough, permissions for $user, read-only, counts; 2 x 2.5 MB at 10 MB/s in $both ms, open latency $small ms; holds)"
