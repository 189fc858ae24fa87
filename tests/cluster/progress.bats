#!/usr/bin/env bats
# Progress on long staging (issue 11, item 4): a staging longer than [stage] progress_interval
# prints progress lines (source, percent, bytes done of total, rate, time left) to the job's
# output before its summary line, a short one prints none, and `stagehand status` shows running
# stagings, through the daemon and in the job without it.

load helpers


setup_file() {
  require_sharedfs
  W=$STAGEHAND_CLUSTER_DIR/work
  rm -rf "$W/prog-src" "$W/prog"
  mkdir -p "$W/prog-src/ds" "$W/prog"
  head -c 32M /dev/urandom >"$W/prog-src/ds/part.bin"
  tar -C "$W/prog-src" -cf "$W/prog-src/big.tar" ds
  rm -rf "$W/prog-src/ds"
  mkdir -p "$W/prog-src/tree/sub" && head -c 32M /dev/urandom >"$W/prog-src/tree/sub/part.bin"
  echo small >"$W/prog-src/small.txt"
  chown -R "$STAGEHAND_TEST_USER:" "$W/prog-src" "$W/prog"
  # A slow shared filesystem (4 MB/s): 32 MiB take about 8 s to read.
  # (status_while_staging holds its reads past the first MiB while WORK/prog.gate exists.)
  rm -f "$W/prog.gate"
  setsid /usr/bin/python3 "$SHAREDFS" "$W/prog-src" "$W/prog" --mbps 4 --hold-reads "$W/prog.gate" \
    >"$STAGEHAND_CLUSTER_DIR/log/progressfs.log" 2>&1 &
  for _ in $(seq 1 600); do [ -e "$W/prog/.sharedfs-stats" ] && break; sleep 0.1; done
  [ -e "$W/prog/.sharedfs-stats" ]
  settle "$W/prog-src"
}

teardown_file() {
  fusermount -u "$STAGEHAND_CLUSTER_DIR/work/prog" 2>/dev/null || umount -l "$STAGEHAND_CLUSTER_DIR/work/prog" || true
}

setup() {
  set_tmpdir_config "" '[stage]
progress_interval = "2s"'
}

# A fresh copy of the archive (a new inode: a cache miss, read again from the slow share).
fresh() { as_user "cp prog-src/big.tar prog-src/$1" && settle "$WORK/prog-src/$1"; }

# The daemon of node1 restarted with its cache off: staging runs in the job.
cache_off() {
  "$CLUSTER" daemon-stop node1
  sed -i "s|^cache_dir = .*|cache_dir = \"$STAGEHAND_CLUSTER_DIR/etc/slurm.conf\"|" "$STAGEHAND_TEST_CONFIG"
  "$CLUSTER" daemon-start node1
}

cache_on() {
  "$CLUSTER" daemon-stop node1
  set_tmpdir_config ""
  "$CLUSTER" daemon-start node1
}

status_json() { "$STAGEHAND_BUILD_DIR/helper/stagehand" status --json --config "$STAGEHAND_TEST_CONFIG" --node node1; }

# Checks LAST_OUTPUT: at least one progress line for SOURCE on node1, each before the summary.
assert_progress_before_summary() {
  local src=$1 lines summary_at first_at
  lines=$(echo "$LAST_OUTPUT" | grep -nE "^stagehand: node1: staging .*/$src: [0-9]+%, [0-9.]+ [KMG]?i?B of 32\.0 MiB, [0-9.]+ [KMG]?i?B/s, [0-9]+ s left$") || {
    echo "no progress line for $src" >&2; return 1; }
  summary_at=$(echo "$LAST_OUTPUT" | grep -nE "^stagehand: node1: unpacked .*/$src -> " | cut -d: -f1)
  [ -n "$summary_at" ]
  first_at=$(echo "$lines" | tail -n1 | cut -d: -f1)
  [ "$first_at" -lt "$summary_at" ]
}

@test "a staging longer than progress_interval prints progress lines before its summary (in the job, no daemon cache)" {
  cache_off
  fresh a.tar
  submit -N1 -w node1 --stage-data=prog/a.tar:a --wrap "'cmp \$SLURM_TMPDIR/a/ds/part.bin $WORK/prog-src/big.tar >/dev/null 2>&1; echo staged'"
  cache_on
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -q 'staging without the cache'
  assert_progress_before_summary a.tar
  # About 8 s at a 2 s interval: several lines, not one per tick.
  n=$(echo "$LAST_OUTPUT" | grep -c '^stagehand: node1: staging ')
  [ "$n" -ge 2 ] && [ "$n" -le 6 ]
}

@test "a staging through the node daemon prints progress lines before its summary" {
  fresh b.tar
  submit -N1 -w node1 --stage-data=prog/b.tar:b --wrap true
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -q '(cache miss)$'
  assert_progress_before_summary b.tar
}

# A directory reaches the daemon's cache as a stream (through a pipe, which has no offset to look
# at): its progress is the bytes the fill has written.
@test "a directory staged through the node daemon prints progress that moves, before its summary" {
  submit -N1 -w node1 --stage-data=prog/tree:t --wrap "'cmp \$SLURM_TMPDIR/t/sub/part.bin $WORK/prog-src/tree/sub/part.bin && echo same'"
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -qx same
  echo "$LAST_OUTPUT" | grep -q '^stagehand: node1: copied .*/tree -> .*(cache miss)$'
  local moving summary_at
  moving=$(echo "$LAST_OUTPUT" | grep -nE "^stagehand: node1: staging .*/tree: [1-9][0-9]*%, [0-9.]+ [KMG]?i?B of 32\.0 MiB, [0-9.]+ [KMG]?i?B/s, [0-9]+ s left$") || {
    echo "no progress line with bytes done for tree" >&2; return 1; }
  summary_at=$(echo "$LAST_OUTPUT" | grep -n '^stagehand: node1: copied .*/tree -> ' | cut -d: -f1)
  [ "$(echo "$moving" | tail -n1 | cut -d: -f1)" -lt "$summary_at" ]
}

# Without the daemon the job copies the directory itself: its progress is the bytes copied so far
# of the total its check on the node measured (it said "size unknown" before).
@test "a directory staged in the job (no daemon cache) prints progress with percent and time left" {
  cache_off
  submit -N1 -w node1 --stage-data=prog/tree:t2 --wrap "'cmp \$SLURM_TMPDIR/t2/sub/part.bin $WORK/prog-src/tree/sub/part.bin && echo same'"
  cache_on
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -qx same
  echo "$LAST_OUTPUT" | grep -q '^stagehand: node1: copied .*/tree -> .*(no cache)$'
  ! echo "$LAST_OUTPUT" | grep -q 'size unknown' || false
  local moving summary_at
  moving=$(echo "$LAST_OUTPUT" | grep -nE "^stagehand: node1: staging .*/tree: [1-9][0-9]*%, [0-9.]+ [KMG]?i?B of 32\.0 MiB, [0-9.]+ [KMG]?i?B/s, [0-9]+ s left$") || {
    echo "no progress line with bytes done for tree" >&2; return 1; }
  summary_at=$(echo "$LAST_OUTPUT" | grep -n '^stagehand: node1: copied .*/tree -> ' | cut -d: -f1)
  [ "$(echo "$moving" | tail -n1 | cut -d: -f1)" -lt "$summary_at" ]
}

@test "a staging shorter than the interval prints no progress line; progress_interval = 0 prints none" {
  submit -N1 -w node1 --stage-data=prog/small.txt:small.txt --wrap true
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -q '^stagehand: node1: copied .*/small.txt -> '
  ! echo "$LAST_OUTPUT" | grep -q 'staging ' || false
  set_tmpdir_config "" '[stage]
progress_interval = "0"'
  fresh c.tar
  submit -N1 -w node1 --stage-data=prog/c.tar:c --wrap true
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -q '^stagehand: node1: unpacked .*/c.tar -> '
  ! echo "$LAST_OUTPUT" | grep -q 'staging ' || false
}

# Submits a job staging prog/SRC on node1 without waiting, its reads held past the first MiB
# (the share's gate) so that the staging is under way however slowly a loaded machine starts the
# job; polls `stagehand status` until it lists the staging, lets the reads go; prints the status
# JSON seen.
status_while_staging() {
  local out i s seen="not seen" t0=$SECONDS
  touch "$WORK/prog.gate"
  out=$(as_user "sbatch --parsable -N1 -w node1 -o out.%j --stage-data=prog/$1:x --wrap true")
  JOB_ID=$(echo "$out" | grep -Eo '^[0-9]+' | head -n1)
  for i in $(seq 1 600); do
    s=$(status_json)
    if echo "$s" | python3 -c "import json,sys; sys.exit(0 if json.load(sys.stdin)['stagings'] else 1)"; then
      echo "$s"
      seen=seen
      break
    fi
    if ((i % 8 == 0)) && [ -z "$(squeue -h -j "$JOB_ID" 2>/dev/null)" ]; then
      break # ended (or never ran) without its staging seen
    fi
    sleep 0.25
  done
  echo "status_while_staging $1: $seen after $((SECONDS - t0)) s" >&2
  rm "$WORK/prog.gate"
  wait_job_done "$JOB_ID"
}

check_staging_json() {
  python3 -c "
import json, sys
s = json.load(sys.stdin)['stagings'][0]
assert s['source'].endswith('prog/$1'), s
assert s['total_bytes'] >= 32 << 20, s
assert 0 <= s['done_bytes'] <= s['total_bytes'], s
assert s['seconds'] >= 0, s
"
}

@test "stagehand status shows a running staging, through the daemon and in the job" {
  fresh d.tar
  seen=$(status_while_staging d.tar)
  echo "$seen" | check_staging_json d.tar
  cache_off
  fresh e.tar
  seen=$(status_while_staging e.tar)
  cache_on
  echo "$seen" | check_staging_json e.tar
}
