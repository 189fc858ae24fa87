#!/usr/bin/env bats
# Cache views (issue 25 item 4): a cache hit shown to the job as its own files, O(1), through an
# idmapped overlay the plugin mounts as root at task start (plugin/cache_views.cpp); no mount
# outlives its job, however it ends; another user reaches nothing; off, hits are links as before.

load helpers

bats_require_minimum_version 1.5.0

setup_file() {
  id "${STAGEHAND_TEST_USER}-2" >/dev/null 2>&1 || useradd --create-home "${STAGEHAND_TEST_USER}-2"
  W=$STAGEHAND_CLUSTER_DIR/work
  rm -rf "$W/views-src" "$W/views.tar"
  mkdir -p "$W/views-src/d/sub"
  printf weights >"$W/views-src/d/ckpt.pt"
  printf '#!/bin/sh\n' >"$W/views-src/d/run.sh"
  printf s >"$W/views-src/d/sub/secret"
  printf ro >"$W/views-src/d/ro.txt"
  chmod 0640 "$W/views-src/d/ckpt.pt"; chmod 0755 "$W/views-src/d/run.sh"; chmod 0600 "$W/views-src/d/sub/secret"
  chmod 0444 "$W/views-src/d/ro.txt"; chmod 0750 "$W/views-src/d/sub"
  tar -C "$W/views-src" -cf "$W/views.tar" d
  chown -R "$STAGEHAND_TEST_USER:" "$W/views-src" "$W/views.tar"
  settle "$W/views.tar"
  # Fill node1's cache: every test below is a hit.
  runuser -u "$STAGEHAND_TEST_USER" -- env SLURM_CONF="$SLURM_CONF" PATH="${STAGEHAND_SLURM_BIN:-/usr/bin}:/usr/bin:/bin" \
    bash -c "cd '$W' && sbatch --wait -N1 -w node1 -o /dev/null --stage-data=views.tar:o --wrap true"
  cached node1 views.tar # a miss's entry is made after its job has the data
}

# A held job a failed test left: cancelled, so that the next test has the node.
eval "helpers_$(declare -f teardown)"
teardown() {
  if [ -n "${ID:-}" ]; then
    rm -f "$WORK/hold.$ID"
    scancel "$ID" 2>/dev/null || true
    wait_job_done "$ID" || true
  fi
  helpers_teardown
}

slurmd_pid() { cat "$STAGEHAND_CLUSTER_DIR/slurmd-node1.pid"; }
# Overlays mounted under the scratch base, as node1's slurmd (the node's namespace) sees them.
overlays_under_scratch() {
  awk -v s="$SCRATCH/" '{ split($0, p, " - "); split(p[1], a, " "); split(p[2], b, " ")
    if (b[1] == "overlay" && index(a[5], s) == 1) print a[5] }' "/proc/$(slurmd_pid)/mountinfo"
}
views_dir() { echo "$SCRATCH/node1/.views/job_$1"; }
# A job's batch script prints the overlay lines of its mountinfo with this; job_overlays then names
# the overlay mount points in job $1's directory, each once, in order. The filter is here, on the
# job's known directory: the mountinfo also shows other clusters' views when CI runs lanes side by
# side, and $SLURM_TMPDIR is not set in a batch step without --tmpdir (it was, in a filter, once).
PRINT_OVERLAYS='grep " - overlay " /proc/self/mountinfo | sed "s/^/mountinfo: /"'
job_overlays() {
  echo "$LAST_OUTPUT" | awk -v d="$(job_dir node1 "$1")/" '$1 == "mountinfo:" && index($6, d) == 1 { print $6 }' |
    sort -u | sed 's|.*/||' | paste -sd' '
}
# Job $1, gone (its epilog done), left no overlay and no .views directory: the epilog removed them.
assert_epilog_removed_views() {
  [ -z "$(overlays_under_scratch)" ]
  [ ! -e "$(views_dir "$1")" ]
}
# Waits (at most 60 s: the epilog, else GC) until job $1 left no overlay and no .views directory.
assert_no_view_left() {
  for _ in $(seq 1 120); do
    [ -z "$(overlays_under_scratch)" ] && [ ! -e "$(views_dir "$1")" ] && return 0
    sleep 0.5
  done
  echo "left: $(overlays_under_scratch) $(ls -d "$(views_dir "$1")" 2>&1)" >&2
  return 1
}
# Starts a job on node1 whose hit is a view and which holds until $WORK/hold.<id> is removed; sets
# ID once the job has its view.
start_held_job() {
  cat >"$WORK/held.sh" <<'SCRIPT'
#!/bin/bash
touch "hold.$SLURM_JOB_ID"
grep -q " $SLURM_TMPDIR/o .* - overlay " /proc/self/mountinfo && touch "ready.$SLURM_JOB_ID"
while [ -e "hold.$SLURM_JOB_ID" ]; do sleep 0.2; done
cat "$SLURM_TMPDIR/o/d/ckpt.pt"; echo
SCRIPT
  chmod 0755 "$WORK/held.sh"
  ID=$(as_user "sbatch --parsable -N1 -w node1 -o out.%j --stage-data=views.tar:o held.sh")
  for _ in $(seq 1 200); do [ -e "$WORK/ready.$ID" ] && break; sleep 0.1; done
  [ -e "$WORK/ready.$ID" ]
  [ -n "$(overlays_under_scratch)" ]
  [ -d "$(views_dir "$ID")" ]
}

@test "a hit is the job user's own files with the archive's modes, changeable in place; the cache never changes" {
  cat >"$WORK/view-job.sh" <<'SCRIPT'
cd "$SLURM_TMPDIR/o/d" || exit 1
grep -q " $SLURM_TMPDIR/o .* - overlay " /proc/self/mountinfo && echo mounted
stat -c 'mode %U %G %a %n' ckpt.pt run.sh sub sub/secret ro.txt
python3 -c 'open("ckpt.pt", "w").write("step 2")' && echo rewrote
echo more >>run.sh && echo appended
chmod 0600 run.sh && echo chmodded
rm sub/secret && echo removed
touch added && echo added
[ "$(cat ckpt.pt)" = "step 2" ] && echo reads-own
SCRIPT
  chmod 0644 "$WORK/view-job.sh"
  submit -N1 -w node1 --stage-data=views.tar:o --wrap "'bash $WORK/view-job.sh'"
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -q 'unpacked .*views.tar -> .*/o: 4 files, .*shown as your own files (cache view) (cache hit)$'
  echo "$LAST_OUTPUT" | grep -qx mounted
  g=$(id -gn "$STAGEHAND_TEST_USER")
  for want in "$STAGEHAND_TEST_USER $g 640 ckpt.pt" "$STAGEHAND_TEST_USER $g 755 run.sh" "$STAGEHAND_TEST_USER $g 750 sub" \
    "$STAGEHAND_TEST_USER $g 600 sub/secret" "$STAGEHAND_TEST_USER $g 444 ro.txt"; do
    echo "$LAST_OUTPUT" | grep -qx "mode $want"
  done
  for did in rewrote appended chmodded removed added reads-own; do echo "$LAST_OUTPUT" | grep -qx "$did"; done
  assert_epilog_removed_views "$JOB_ID"
  # The next job sees the archive as it was.
  submit -N1 -w node1 --stage-data=views.tar:o --wrap "'cd \$SLURM_TMPDIR/o/d && cat ckpt.pt && echo && cat run.sh && ls sub && ls'"
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -q '(cache view) (cache hit)$'
  echo "$LAST_OUTPUT" | grep -qx weights
  echo "$LAST_OUTPUT" | grep -qx secret
  ! echo "$LAST_OUTPUT" | grep -qx more || false
  ! echo "$LAST_OUTPUT" | grep -qx added || false
  assert_epilog_removed_views "$JOB_ID"
}

# Root never looks at a source: the daemon's child, as the job user, finds that this one is a
# directory (one child for either kind) and the hit is shown as a view as an archive's is.
@test "a directory source, once cached, is shown as a view: the user's own files, changeable in place" {
  settle "$WORK/views-src"
  submit -N1 -w node1 --stage-data=views-src/d:dd --wrap true
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -q '^stagehand: node1: copied .*/views-src/d -> .*/dd: 4 files, .*(cache miss)$'
  cached node1 views-src/d
  submit -N1 -w node1 --stage-data=views-src/d:dd --wrap "'cd \$SLURM_TMPDIR/dd && stat -c \"%U %a %n\" ckpt.pt && grep -q \" \$SLURM_TMPDIR/dd .* - overlay \" /proc/self/mountinfo && echo mounted && echo new >ckpt.pt && cat ckpt.pt'"
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -q '^stagehand: node1: copied .*/views-src/d -> .*/dd: 4 files, .* shown as your own files (cache view) (cache hit)$'
  echo "$LAST_OUTPUT" | grep -qx "$STAGEHAND_TEST_USER 640 ckpt.pt"
  echo "$LAST_OUTPUT" | grep -qx mounted
  echo "$LAST_OUTPUT" | grep -qx new
  [ "$(cat "$WORK/views-src/d/ckpt.pt")" = weights ]
  assert_epilog_removed_views "$JOB_ID"
}

# A staging whose every source is a view has nothing left to stage: the task writes its summary
# line and starts no staging helper (whose exec was most of a hit's cost). Here the helper, were it
# started, would be killed at once and fail the job.
@test "a hit shown as a view starts no staging helper: its summary line and data, though the helper would fail" {
  helper=$STAGEHAND_CLUSTER_DIR/lib/stagehand
  cp -p "$helper" "$helper.real"
  printf '#!/bin/sh\nkill -KILL $$\n' >"$helper"
  submit -N1 -n2 -w node1 --stage-data=views.tar:o --wrap "'srun -n2 bash -c \"cat \\\$SLURM_TMPDIR/o/d/ckpt.pt; echo\"'"
  mv -f "$helper.real" "$helper"
  [ "$JOB_RC" -eq 0 ]
  [ "$(echo "$LAST_OUTPUT" | grep -c '^stagehand: node1: unpacked .*/views.tar -> .*/o: 4 files, .* in 0.00 s, shown as your own files (cache view) (cache hit)$')" -eq 1 ]
  [ "$(echo "$LAST_OUTPUT" | grep -cx weights)" -eq 2 ]
  ! echo "$LAST_OUTPUT" | grep -q 'staging helper' || false
  assert_epilog_removed_views "$JOB_ID"
  # A source that is no view still needs the helper: this job fails, saying so.
  cp -p "$helper" "$helper.real"
  printf '#!/bin/sh\nkill -KILL $$\n' >"$helper"
  submit -N1 -w node1 --stage-data=views.tar:o,views.tar:p:copy --wrap "'echo should-not-run'"
  mv -f "$helper.real" "$helper"
  [ "$JOB_RC" -ne 0 ]
  echo "$LAST_OUTPUT" | grep -q 'the staging helper was killed by signal 9'
  ! echo "$LAST_OUTPUT" | grep -q should-not-run || false
}

@test "4 tasks of a step start at once: the hit is mounted once and each task sees it" {
  submit -N1 -n4 -w node1 --wrap "'srun --stage-data=views.tar:o -n4 bash -c \"cat \\\$SLURM_TMPDIR/o/d/ckpt.pt; echo\"; $PRINT_OVERLAYS'"
  [ "$JOB_RC" -eq 0 ]
  [ "$(echo "$LAST_OUTPUT" | grep -c '(cache view) (cache hit)$')" -eq 1 ]
  [ "$(echo "$LAST_OUTPUT" | grep -cx weights)" -eq 4 ]
  [ "$(job_overlays "$JOB_ID")" = "o" ]
  assert_epilog_removed_views "$JOB_ID"
}

@test "later steps of a job staging the same source to new names get views of their own" {
  submit -N1 -w node1 --wrap "'for n in o p q; do srun --stage-data=views.tar:\$n bash -c \"cat \\\$SLURM_TMPDIR/\$n/d/ckpt.pt; echo\"; done; $PRINT_OVERLAYS'"
  [ "$JOB_RC" -eq 0 ]
  [ "$(echo "$LAST_OUTPUT" | grep -c '(cache view) (cache hit)$')" -eq 3 ]
  [ "$(echo "$LAST_OUTPUT" | grep -cx weights)" -eq 3 ]
  [ "$(job_overlays "$JOB_ID")" = "o p q" ]
  assert_epilog_removed_views "$JOB_ID"
}

@test "another user reaches neither the view nor its upper; scancel leaves no mount" {
  start_held_job
  d=$(job_dir node1 "$ID")
  [ -d "$(views_dir "$ID")/view.0/upper" ]
  for path in "$d/o" "$d/o/d" "$(views_dir "$ID")" "$(views_dir "$ID")/view.0/upper" "$SCRATCH/node1/.views"; do
    run ! runuser -u "${STAGEHAND_TEST_USER}-2" -- ls "$path"
    [[ "$output" == *"Permission denied"* ]]
  done
  # Nor the job's own user: root's upper is theirs only through the view.
  run ! runuser -u "$STAGEHAND_TEST_USER" -- ls "$(views_dir "$ID")"
  [[ "$output" == *"Permission denied"* ]]
  scancel "$ID"
  wait_job_done "$ID"
  assert_epilog_removed_views "$ID"
}

# root's `cache evict` removes what jobs have links of (the links outlive the entry), never an
# entry a running job shows as a view: its files are the view's, and the job's data would vanish.
@test "cache evict leaves an entry a running job shows as a view, names it, and the job reads its data" {
  start_held_job
  run "$STAGEHAND_BUILD_DIR/helper/stagehand" cache evict --all --config "$STAGEHAND_TEST_CONFIG" --node node1
  echo "$output"
  [ "$status" -eq 1 ]
  [[ "$output" == *"views.tar: shown as a cache view in a running job on this node, not evicted"* ]]
  rm -f "$WORK/hold.$ID"
  JOB_RC=$(job_exit_code "$ID")
  wait_job_done "$ID"
  [ "$JOB_RC" -eq 0 ]
  grep -qx weights "$WORK/out.$ID"
  # Once the job has ended, the same evict takes it; then the cache is filled again for the tests
  # after this one (every one a hit).
  run "$STAGEHAND_BUILD_DIR/helper/stagehand" cache evict --all --config "$STAGEHAND_TEST_CONFIG" --node node1
  echo "$output"
  [ "$status" -eq 0 ]
  [ -z "$(ls -A "$STAGEHAND_CLUSTER_DIR/cache/node1/entries")" ]
  submit -N1 -w node1 --stage-data=views.tar:o --wrap true
  [ "$JOB_RC" -eq 0 ]
  cached node1 views.tar
}

@test "kill -9 of the job's slurmstepd leaves no mount once the job is gone" {
  start_held_job
  for pid in $(pgrep -f "^slurmstepd: \[$ID\."); do kill -9 "$pid"; done
  pkill -9 -u "$STAGEHAND_TEST_USER" -f 'held.sh' || true
  scancel "$ID" || true
  wait_job_done "$ID"
  assert_no_view_left "$ID"
}

@test "a daemon restart mid-job: the view stays the job's; none outlives it" {
  start_held_job
  "$CLUSTER" daemon-stop node1
  "$CLUSTER" daemon-start node1
  rm -f "$WORK/hold.$ID"
  JOB_RC=$(job_exit_code "$ID")
  wait_job_done "$ID"
  [ "$JOB_RC" -eq 0 ]
  grep -qx weights "$WORK/out.$ID"
  assert_no_view_left "$ID"
}

@test "a job whose views cannot be recorded has none mounted: it stages as without views, and runs" {
  # The record's name is the specs' (job A's, the same option as job B's below).
  start_held_job
  local record
  record=$(cd "$(views_dir "$ID")" && ls -d record*)
  [ -n "$record" ]
  rm -f "$WORK/hold.$ID"
  wait_job_done "$ID"
  # Job B's step, started once its record's name is taken by a directory (its write then fails,
  # as on a full or failing disk; planted once the job runs: its prolog sends whatever views an
  # earlier run left to the trash): no view is mounted (a record of none is written first), or one
  # left unrecorded would meet the job's staging as a destination that exists already.
  cat >"$WORK/step-on-go.sh" <<'SCRIPT'
#!/bin/bash
touch "running.$SLURM_JOB_ID"
while [ ! -e "go.$SLURM_JOB_ID" ]; do sleep 0.1; done
srun --stage-data=views.tar:o bash -c 'cat "$SLURM_TMPDIR/o/d/ckpt.pt"; echo'
SCRIPT
  chmod 0755 "$WORK/step-on-go.sh"
  local id
  id=$(as_user "sbatch --parsable -N1 -w node1 -o out.%j step-on-go.sh")
  for _ in $(seq 1 300); do [ -e "$WORK/running.$id" ] && break; sleep 0.1; done
  [ -e "$WORK/running.$id" ]
  mkdir -p "$(views_dir "$id")/$record/taken"
  chmod 0700 "$(views_dir "$id")"
  touch "$WORK/go.$id"
  JOB_RC=$(job_exit_code "$id")
  wait_job_done "$id"
  cat "$WORK/out.$id"
  [ "$JOB_RC" -eq 0 ]
  grep -qx weights "$WORK/out.$id"
  grep -q '(cache hit)$' "$WORK/out.$id"
  ! grep -q '(cache view)' "$WORK/out.$id" || false
  assert_no_view_left "$id"
}

# A requeued run on the same node whose earlier run's views were left behind (its epilog never
# ran) stages afresh: its prolog sends them to the trash. Read as its own, the earlier record said
# "shown as views" of mounts that were gone, and the job had no data.
@test "a job's views left by an earlier run (its epilog never ran) are not taken for the next run's" {
  start_held_job
  local record
  record=$(cd "$(views_dir "$ID")" && ls -d record*)
  cp "$(views_dir "$ID")/$record" "$WORK/record.$ID"
  local id
  id=$(as_user "sbatch --parsable --hold -N1 -w node1 -o out.%j --stage-data=views.tar:o \
    --wrap 'cat \$SLURM_TMPDIR/o/d/ckpt.pt; echo'")
  rm -f "$WORK/hold.$ID"
  wait_job_done "$ID"
  # No daemon on the node (as after its crash): no GC pass removes the planted views meanwhile.
  "$CLUSTER" daemon-stop node1
  mkdir -p "$(views_dir "$id")"
  chmod 0700 "$(views_dir "$id")"
  cp "$WORK/record.$ID" "$(views_dir "$id")/$record" # job $id's earlier run's, as it left it
  scontrol release "$id"
  JOB_RC=$(job_exit_code "$id")
  wait_job_done "$id"
  "$CLUSTER" daemon-start node1
  cat "$WORK/out.$id"
  [ "$JOB_RC" -eq 0 ]
  grep -qx weights "$WORK/out.$id"
  ! grep -q '(cache view)' "$WORK/out.$id" || false
  assert_no_view_left "$id"
}

@test "a slurmd restart mid-job: none outlives the job" {
  start_held_job
  old=$(slurmd_pid)
  kill "$old"
  # A slurmd's shutdown took over 10 s once on a loaded CI machine (the test failed, and the node,
  # left without a slurmd, failed the tests after it): a minute, then SIGKILL, which is a restart too.
  for _ in $(seq 1 600); do kill -0 "$old" 2>/dev/null || break; sleep 0.1; done
  kill_recorded "$old" "slurmd -f $SLURM_CONF -N node1"
  for _ in $(seq 1 50); do kill -0 "$old" 2>/dev/null || break; sleep 0.1; done
  ! kill -0 "$old" 2>/dev/null || false
  "$CLUSTER" node-start node1
  for _ in $(seq 1 100); do
    new=$(cat "$STAGEHAND_CLUSTER_DIR/slurmd-node1.pid" 2>/dev/null || true)
    [ -n "$new" ] && [ "$new" != "$old" ] && kill -0 "$new" 2>/dev/null && break
    sleep 0.1
  done
  [ "$(slurmd_pid)" != "$old" ]
  [ -n "$(overlays_under_scratch)" ] # the view is the job's still
  rm -f "$WORK/hold.$ID"
  JOB_RC=$(job_exit_code "$ID")
  wait_job_done "$ID"
  [ "$JOB_RC" -eq 0 ]
  grep -qx weights "$WORK/out.$ID"
  assert_no_view_left "$ID"
}

@test "GC removes the views directory of a job that is gone (a node restart)" {
  mkdir -p "$SCRATCH/node1/.views/job_777778/view.0/upper"
  chmod 0700 "$SCRATCH/node1/.views/job_777778"
  for _ in $(seq 1 60); do [ -e "$SCRATCH/node1/.views/job_777778" ] || break; sleep 0.5; done # gc_interval is 3 s
  [ ! -e "$SCRATCH/node1/.views/job_777778" ]
  grep -q "gc: removed $SCRATCH/node1/.views/job_777778 (the cache views of an ended job)" "$STAGEHAND_CLUSTER_DIR/log/stagehandd-node1.log"
}

@test "with [daemon] cache_views = false a hit is linked as before: hard links to root's files" {
  cat >"$STAGEHAND_TEST_CONFIG.new" <<TOML
[tmpdir]
base = "$SCRATCH/%n"
keep_for = "1h"
$(cat "$STAGEHAND_DAEMON_TOML")
cache_views = false
TOML
  chmod 0644 "$STAGEHAND_TEST_CONFIG.new"
  mv -f "$STAGEHAND_TEST_CONFIG.new" "$STAGEHAND_TEST_CONFIG"
  submit -N1 -w node1 --stage-data=views.tar:o --wrap "'grep -c \" - overlay \" /proc/self/mountinfo; stat -c \"mode %U %a %n\" \$SLURM_TMPDIR/o/d/ckpt.pt \$SLURM_TMPDIR/o/d/run.sh'"
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -q 'unpacked .*views.tar -> .*/o: 4 files, .* s (cache hit)$'
  ! echo "$LAST_OUTPUT" | grep -q 'cache view' || false
  echo "$LAST_OUTPUT" | grep -qx "mode root 755 .*run.sh" # a hard link to root's file
  echo "$LAST_OUTPUT" | grep -qx "mode $STAGEHAND_TEST_USER 640 .*ckpt.pt" # others may not read it: a copy, the user's
  [ -z "$(overlays_under_scratch)" ]
}

# Issue 25, item 3: jobs that start together on a source nobody has cached yet. The first to ask
# at task start reads it; the others wait for that read and its entry, and are shown views: one
# read (daemon.bats: the first shown a view too when the others asked meanwhile).
@test "4 jobs started together on a fresh source: one reads it, the other three are shown views" {
  as_user "mkdir -p crowd-src/c && for i in \$(seq 1 200); do head -c 20000 /dev/urandom >crowd-src/c/f\$i; done && tar -C crowd-src -cf crowd.tar c"
  settle "$WORK/crowd.tar"
  want=$(cd "$WORK/crowd-src" && find c -type f -exec sha256sum {} + | LC_ALL=C sort | sha256sum | cut -c1-64)
  ids=()
  for i in 1 2 3 4; do
    ids+=("$(as_user "sbatch --parsable -N1 -n1 -w node1 --stage-data=crowd.tar:c -o out.%j --wrap 'cd \$SLURM_TMPDIR/c && find c -type f -exec sha256sum {} + | LC_ALL=C sort | sha256sum'")")
  done
  for id in "${ids[@]}"; do wait_job_done "$id"; done
  all=$(for id in "${ids[@]}"; do cat "$WORK/out.$id"; done); echo "$all"
  [ "$(echo "$all" | grep -c "^$want ")" -eq 4 ]
  # The first to ask has the daemon read it into the cache and is shown it too when the others asked
  # meanwhile (jobs starting together), else stages it as it streams: one miss either way.
  [ "$(echo "$all" | grep -c '(cache miss)$')" -eq 1 ]
  [ "$(echo "$all" | grep -c 'shown as your own files (cache view) (cache hit)$')" -eq 3 ]
}

# A job submitted without --stage-data (here --tmpdir only) that started on the node moments before
# is not a job about to ask for its sources: a lone job's fresh archive is staged as it streams, not
# read into the cache first (that is for jobs starting together, above). The daemon is told at the
# prolog; CI once saw a job of the test before turn the next test's miss into a read into the cache.
@test "a job without --stage-data starting beside another does not turn its miss into a read into the cache" {
  for try in 1 2 3; do
    as_user "mkdir -p lone-src/l$try && head -c 1M /dev/urandom >lone-src/l$try/f && tar -C lone-src -cf lone$try.tar l$try"
    settle "$WORK/lone$try.tar"
    ID=$(as_user "sbatch --parsable -N1 -n1 -w node1 --tmpdir -o /dev/null --wrap 'sleep 120'")
    for _ in $(seq 1 100); do [ -n "$(squeue -h -j "$ID" -t R -o %i)" ] && break; sleep 0.2; done
    [ -n "$(squeue -h -j "$ID" -t R -o %i)" ] # running: its prolog has registered it
    # The task starts once its staging is done: the time it prints is after the job asked.
    submit -N1 -n1 -w node1 --stage-data="lone$try.tar:l" --wrap "'echo asked \$(date +%s)'"
    [ "$JOB_RC" -eq 0 ]
    sleeper_start=$(date -d "$(scontrol -o show job "$ID" | grep -o 'StartTime=[^ ]*' | cut -d= -f2)" +%s)
    asked=$(echo "$LAST_OUTPUT" | sed -n 's/^asked //p')
    [[ "$sleeper_start" =~ ^[0-9]+$ && "$asked" =~ ^[0-9]+$ ]]
    gap=$((asked - sleeper_start))
    # The prolog told the daemon which of the two was submitted with --stage-data.
    log=$STAGEHAND_CLUSTER_DIR/log/stagehandd-node1.log
    grep -q "job $ID: registered (uid [0-9]*, no --stage-data)$" "$log"
    grep -q "job $JOB_ID: registered (uid [0-9]*)$" "$log"
    scancel "$ID"; wait_job_done "$ID"; ID=
    echo "try $try: staged within ${gap} s of the start of the job without --stage-data"; echo "$LAST_OUTPUT"
    # The daemon counts jobs whose prolog (at or after their start) ran in the last 10 s when one
    # asks: a job that asked later than that proves nothing.
    if [ "$gap" -le 9 ]; then
      echo "$LAST_OUTPUT" | grep -q "unpacked .*lone$try.tar -> .*/l: 1 files, 1.0 MiB in .* s (cache miss)$"
      return 0
    fi
  done
  echo "no try staged within 9 s of the other job's start: nothing shown" >&2
  return 1
}
