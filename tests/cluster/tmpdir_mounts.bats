#!/usr/bin/env bats
# Issue 24, item 3: node-local data a user could pin under a mount. After its job a directory is
# root's (owner root, mode 0700: the user can neither enter it nor mount anything on it), the epilog
# detaches a FUSE mount left on it or inside it, then removes all of it: nothing stays pinned. A
# kept directory stays the user's until keep_for is up; then GC detaches what the user mounted.
# Run without the daemons (stopped in setup) so the directory can be looked at between the
# epilog and `stagehand gc`; the mounts are tests/tools/sharedfs.py (FUSE), started as root.

load helpers

STAGEHAND=$STAGEHAND_BUILD_DIR/helper/stagehand

setup_file() {
  load helpers
  require_sharedfs
  mkdir -p "$STAGEHAND_CLUSTER_DIR/mounts-src"
  echo served >"$STAGEHAND_CLUSTER_DIR/mounts-src/served"
}

teardown_file() {
  local pid
  for pid in $(cat "$STAGEHAND_CLUSTER_DIR"/mounts-fuse.*.pid 2>/dev/null); do kill_recorded "$pid" "$SHAREDFS $STAGEHAND_CLUSTER_DIR/mounts-src"; done
  rm -f "$STAGEHAND_CLUSTER_DIR"/mounts-fuse.*.pid
  # Only this cluster's FUSE mounts (clusters run side by side in CI).
  awk -v dir="$(realpath "$STAGEHAND_CLUSTER_DIR")/" 'index($5, dir) == 1 { for (i = 7; i < NF; i++) if ($i == "-" && $(i + 1) ~ /^fuse/) print $5 }' \
    /proc/self/mountinfo | sort -r | while read -r m; do umount -l "$(printf '%b' "$m")" 2>/dev/null || true; done
  rm -rf "$STAGEHAND_CLUSTER_DIR/mounts-src"
  load helpers
  ensure_daemons
}

# Each test without daemons (helpers' teardown starts them again).
setup() {
  for n in node1 node2; do "$CLUSTER" daemon-stop "$n"; done
}

# fuse_mount NAME MOUNTPOINT: sharedfs.py serving mounts-src at MOUNTPOINT, as a user's FUSE
# server would be (the kernel does not care who mounted it).
fuse_mount() {
  setsid /usr/bin/python3 "$SHAREDFS" "$STAGEHAND_CLUSTER_DIR/mounts-src" "$2" --nonempty >/dev/null 2>&1 &
  echo $! >"$STAGEHAND_CLUSTER_DIR/mounts-fuse.$1.pid"
  for _ in $(seq 1 100); do grep -q " $2 " /proc/self/mountinfo && return 0; sleep 0.1; done
  return 1
}

mounted() { grep -q " $1 " /proc/self/mountinfo; }


@test "a FUSE mount left inside a job's directory: the epilog detaches it and everything goes at job end" {
  id=$(as_user "sbatch --parsable -N1 -w node1 --tmpdir -o out.%j --wrap 'mkdir \$SLURM_TMPDIR/pin; echo pinned >\$SLURM_TMPDIR/pin/hidden; sleep 300'")
  d=$(job_dir node1 "$id")
  for _ in $(seq 1 100); do [ -e "$d/pin/hidden" ] && break; sleep 0.2; done
  [ -e "$d/pin/hidden" ]
  fuse_mount inside "$d/pin"
  [ "$(cat "$d/pin/served")" = served ]
  as_user "test -x '$d'" # the job's, while it runs
  scancel "$id"; wait_job_done "$id"
  # At job end the epilog took the directory from the user, detached the mount and removed it all
  # (no daemon here: the epilog removes the trash itself).
  ! mounted "$d/pin" || false
  [ -z "$(ls -A "$SCRATCH/node1" | grep "job_$id" || true)" ]
  [ "$(cat "$STAGEHAND_CLUSTER_DIR/mounts-src/served")" = served ] # what it served is untouched
  assert_nodes_healthy
}

@test "a FUSE mount over a whole job's directory: the epilog detaches it and everything goes at job end" {
  id=$(as_user "sbatch --parsable -N1 -w node1 --tmpdir -o out.%j --wrap 'echo pinned >\$SLURM_TMPDIR/under; sleep 300'")
  d=$(job_dir node1 "$id")
  for _ in $(seq 1 100); do [ -e "$d/under" ] && break; sleep 0.2; done
  [ -e "$d/under" ]
  fuse_mount over "$d"
  scancel "$id"; wait_job_done "$id"
  ! mounted "$d" || false
  [ ! -e "$d" ]
  [ -z "$(ls -A "$SCRATCH/node1" | grep "job_$id" || true)" ]
  assert_nodes_healthy
}

@test "a FUSE mount on a kept directory (--tmpdir=keep): gc detaches it when keep_for is up and removes everything" {
  id=$(as_user "sbatch --parsable -N1 -w node1 --tmpdir=keep -o out.%j --wrap 'mkdir \$SLURM_TMPDIR/pin; echo kept >\$SLURM_TMPDIR/pin/hidden; sleep 300'")
  d=$(job_dir node1 "$id")
  for _ in $(seq 1 100); do [ -e "$d/pin/hidden" ] && break; sleep 0.2; done
  [ -e "$d/pin/hidden" ]
  scancel "$id"; wait_job_done "$id"
  # Kept: still the user's for keep_for (SPEC: to copy results out or debug); the user mounts on it.
  [ "$(stat -c %U "$d")" = "$STAGEHAND_TEST_USER" ]
  fuse_mount kept "$d/pin"
  mounted "$d/pin"
  run timeout -s KILL 60 "$STAGEHAND" gc --config "$STAGEHAND_TEST_CONFIG" --node node1
  [ "$status" -eq 0 ]
  mounted "$d/pin" # kept: GC leaves it alone until keep_for is up
  echo "$(($(date +%s) - 60)) $(stat -c %i "$d")" >"$SCRATCH/node1/.keep.job_$id" # expired a minute ago
  run timeout -s KILL 60 "$STAGEHAND" gc --config "$STAGEHAND_TEST_CONFIG" --node node1
  echo "$output"
  [ "$status" -eq 0 ]
  echo "$output" | grep -q "detached a mount a user left on "
  ! mounted "$d/pin" || false
  [ ! -e "$d" ]
  [ -z "$(ls -A "$SCRATCH/node1" | grep "job_$id" || true)" ]
  assert_nodes_healthy
}
