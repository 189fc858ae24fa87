#!/usr/bin/env bats
# Read-once fan-out (issue 11, item 1): a multi-node job reads each archive or file source from
# the shared filesystem once and Slurm's sbcast delivers it to every node, which unpacks its own
# copy. The nodes here run in mount namespaces of their own with a private tmpfs at the tmpdir
# base (cluster.sh node-restart NODE private), so one path is node-local as on a real cluster.
# Without a node daemon (stopped here), but for the test that starts one in each node's namespace.

load helpers

ARCHIVE_BYTES=0

setup_file() {
  require_sharedfs
  W=$STAGEHAND_CLUSTER_DIR/work
  rm -rf "$W/bc-src" "$W/bshared"
  mkdir -p "$W/bc-src/ds" "$W/bshared"
  # 256 MiB archive of incompressible data, and a small one.
  for i in $(seq 1 8); do head -c 32M /dev/urandom >"$W/bc-src/ds/part$i.bin"; done
  (cd "$W/bc-src/ds" && sha256sum part*.bin) >"$W/bc-src/expected.sha"
  tar -C "$W/bc-src" -cf "$W/bc-src/big.tar" ds
  rm -rf "$W/bc-src/ds"
  # 48 MiB: the archive probes (up to 1 MiB at submission and on each node) stay under 10%.
  mkdir -p "$W/bc-src/s" && seq 1 100000 >"$W/bc-src/s/numbers.txt" && head -c 48M /dev/urandom >"$W/bc-src/s/blob"
  tar -C "$W/bc-src" -czf "$W/bc-src/small.tar.gz" s && rm -rf "$W/bc-src/s"
  mkdir -p "$W/bc-src/tree/sub" && echo leaf >"$W/bc-src/tree/sub/f"
  chown -R "$STAGEHAND_TEST_USER:" "$W/bc-src" "$W/bshared"
  rm -rf "$W/bc-slow-src" "$W/bslow" && mkdir -p "$W/bc-slow-src/p" "$W/bslow"
  head -c 24M /dev/urandom >"$W/bc-slow-src/p/blob" && tar -C "$W/bc-slow-src" -cf "$W/bc-slow-src/slow.tar" p
  rm -rf "$W/bc-slow-src/p"
  chown -R "$STAGEHAND_TEST_USER:" "$W/bc-slow-src" "$W/bslow"
  # A directory whose reads wait while the flag exists (the job removes it).
  rm -rf "$W/bc-hold-src" "$W/bhold" "$W/holdctl" && mkdir -p "$W/bc-hold-src/hdir" "$W/bhold" "$W/holdctl"
  head -c 4M /dev/urandom >"$W/bc-hold-src/hdir/f"
  chown -R "$STAGEHAND_TEST_USER:" "$W/bc-hold-src" "$W/bhold" "$W/holdctl"
  # Mounted before the nodes move into their namespaces: they keep a view of them.
  setsid /usr/bin/python3 "$SHAREDFS" "$W/bc-src" "$W/bshared" >"$STAGEHAND_CLUSTER_DIR/log/bcastfs.log" 2>&1 &
  setsid /usr/bin/python3 "$SHAREDFS" "$W/bc-slow-src" "$W/bslow" --mbps 6 >"$STAGEHAND_CLUSTER_DIR/log/bcastslowfs.log" 2>&1 &
  setsid /usr/bin/python3 "$SHAREDFS" "$W/bc-hold-src" "$W/bhold" --hold-reads "$W/holdctl/flag" >"$STAGEHAND_CLUSTER_DIR/log/bcastholdfs.log" 2>&1 &
  for m in bshared bslow bhold; do
    for _ in $(seq 1 600); do [ -e "$W/$m/.sharedfs-stats" ] && break; sleep 0.1; done
    [ -e "$W/$m/.sharedfs-stats" ]
  done
  for n in node1 node2; do
    "$CLUSTER" daemon-stop "$n"
    "$CLUSTER" node-restart "$n" private
  done
}

teardown_file() {
  for n in node1 node2; do "$CLUSTER" daemon-stop "$n"; done # one test starts them in the nodes' namespaces
  for n in node1 node2; do "$CLUSTER" node-restart "$n"; done
  TMPDIR_BASE="" set_tmpdir_config ""
  for n in node1 node2; do "$CLUSTER" daemon-start "$n"; done
  rm -f "$STAGEHAND_CLUSTER_DIR/work/holdctl/flag"
  for m in bshared bslow bhold; do
    fusermount -u "$STAGEHAND_CLUSTER_DIR/work/$m" 2>/dev/null || umount -l "$STAGEHAND_CLUSTER_DIR/work/$m" || true
  done
}

setup() { TMPDIR_BASE="$SCRATCH/local" set_tmpdir_config ""; }

# Not helpers.bash's: the daemons stay stopped and the private layout stays.
teardown() {
  if [ -z "${BATS_TEST_COMPLETED:-}" ]; then
    echo "---- submit output ----"; echo "${SUBMIT_OUTPUT:-}"
    echo "---- job output (job ${JOB_ID:-none}) ----"; echo "${LAST_OUTPUT:-}"
    echo "---- slurmd logs ----"; tail -n 30 "$STAGEHAND_CLUSTER_DIR"/log/slurmd-node*.log || true
    echo "---- daemon logs ----"; tail -n 30 "$STAGEHAND_CLUSTER_DIR"/log/stagehandd-node*.log || true
  fi
  assert_nodes_healthy
}

bytes_read() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['bytes_read'])" "$WORK/bshared/.sharedfs-stats"; }
# markers_sent KIND: the KIND ("done", "none") markers sbcast delivered for job $JOB_ID, as the
# nodes' slurmd logs count them.
markers_sent() {
  cat "$STAGEHAND_CLUSTER_DIR"/log/slurmd-node*.log | grep -c "sbcast req_uid=[0-9]* job_id=$JOB_ID fname=.*\.stagehand-bcast-[0-9a-f]*\.$1 block_no=1$" || true
}
# submit_counted ARGS...: submit (ARGS to sbatch); `read` is then the bytes shared storage served
# meanwhile.
submit_counted() {
  local before
  before=$(bytes_read)
  submit "$@"
  read=$(( $(bytes_read) - before ))
}

# The job's check on each node: the parts' checksums, and nothing of the broadcast left behind.
write_check() {
  script check-nodes.sh <<'EOF2'
#!/bin/bash
srun -N2 --ntasks-per-node=1 bash -c '
  cd "$SLURM_TMPDIR/big/ds" && sha256sum part*.bin | diff - "$SLURM_SUBMIT_DIR/bc-src/expected.sha" && echo "content ok on $SLURMD_NODENAME"
  ls -A "$SLURM_TMPDIR" | grep -q "^\.stagehand-bcast" || echo "no copy left on $SLURMD_NODENAME"'
EOF2
}

@test "a two-node job reads a 256 MiB archive from shared storage once; both nodes hold identical content" {
  write_check
  size=$(stat -c %s "$WORK/bc-src/big.tar")
  submit_counted -N2 --stage-data=bshared/big.tar:big check-nodes.sh
  echo "shared storage read $read bytes for a $size-byte archive on 2 nodes"
  [ "$JOB_RC" -eq 0 ]
  for n in node1 node2; do
    echo "$LAST_OUTPUT" | grep -qx "content ok on $n"
    echo "$LAST_OUTPUT" | grep -qx "no copy left on $n"
  done
  echo "$LAST_OUTPUT" | grep -Eq '^stagehand: node1: unpacked .*/big.tar -> .*/big: 8 files, 256.0 MiB in .* s, read once, broadcast by sbcast in [0-9.]+ s \(no cache\)$'
  echo "$LAST_OUTPUT" | grep -Eq '^stagehand: node2: unpacked .*/big.tar -> .*/big: 8 files, 256.0 MiB in .* s, from the broadcast \(sbcast\)(, waited [0-9.]+ s)? \(no cache\)$'
  [ "$read" -le $(( size * 11 / 10 )) ]
}

@test "a multi-node srun step with its own --stage-data broadcasts to the step's nodes; the other node waits for it" {
  script step.sh <<'EOF2'
#!/bin/bash
srun -N2 --ntasks-per-node=1 --stage-data=bshared/small.tar.gz:small bash -c '
  cmp <(seq 1 100000) "$SLURM_TMPDIR/small/s/numbers.txt" && echo "small ok on $SLURMD_NODENAME"'
EOF2
  size=$(stat -c %s "$WORK/bc-src/small.tar.gz")
  submit_counted -N2 step.sh
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -qx "small ok on node1"
  echo "$LAST_OUTPUT" | grep -qx "small ok on node2"
  echo "$LAST_OUTPUT" | grep -q '^stagehand: node2: unpacked .*small.tar.gz -> .* from the broadcast (sbcast), waited [0-9.]* s (no cache)$'
  [ "$read" -le $(( size * 11 / 10 )) ]
}

# sbcast reads the very file the reader opened and checked, through /dev/fd/N.
@test "a source sbcast can map (not on FUSE) is broadcast straight from the shared file" {
  script direct.sh <<'EOF2'
#!/bin/bash
srun -N2 --ntasks-per-node=1 bash -c '
  cmp <(seq 1 100000) "$SLURM_TMPDIR/direct/s/numbers.txt" && echo "direct ok on $SLURMD_NODENAME"'
EOF2
  submit -N2 --stage-data=bc-src/small.tar.gz:direct direct.sh
  [ "$JOB_RC" -eq 0 ]
  for n in node1 node2; do
    echo "$LAST_OUTPUT" | grep -qx "direct ok on $n"
  done
  echo "$LAST_OUTPUT" | grep -q '^stagehand: node1: unpacked .*small.tar.gz -> .* read once, broadcast by sbcast in [0-9.]* s (no cache)$'
  echo "$LAST_OUTPUT" | grep -q '^stagehand: node2: unpacked .*small.tar.gz -> .* from the broadcast (sbcast)'
}

@test "a long broadcast prints progress lines on the reader and the waiting node before their summaries" {
  TMPDIR_BASE="$SCRATCH/local" set_tmpdir_config "" '[stage]
progress_interval = "1s"'
  script slowstep.sh <<'EOF2'
#!/bin/bash
srun -N2 --ntasks-per-node=1 --stage-data=bslow/slow.tar:slow true
EOF2
  submit -N2 slowstep.sh
  [ "$JOB_RC" -eq 0 ]
  # The reader reads (percent, rate, time left); the other node waits for its copy, which arrives
  # after the read (sbcast then delivers at local speed): its lines say so while it waits.
  for n in node1 node2; do
    if [ $n = node1 ]; then left='[0-9]+ s left'; else left='([0-9]+ s left|time left unknown)'; fi
    first=$(echo "$LAST_OUTPUT" | grep -nE "^stagehand: $n: staging .*slow.tar.*: [0-9]+%, .* of 24\.0 MiB, .*/s, $left$" | head -n1 | cut -d: -f1)
    summary=$(echo "$LAST_OUTPUT" | grep -n "^stagehand: $n: unpacked .*slow.tar -> " | cut -d: -f1)
    [ -n "$first" ]
    [ -n "$summary" ]
    [ "$first" -lt "$summary" ]
  done
}

@test "a directory source is read on every node: no broadcast, nobody waits for one" {
  script dirstep.sh <<'EOF2'
#!/bin/bash
srun -N2 --ntasks-per-node=1 --stage-data=bshared/tree:tree bash -c '
  test "$(cat "$SLURM_TMPDIR/tree/sub/f")" = leaf && echo "tree ok on $SLURMD_NODENAME"'
EOF2
  submit -N2 dirstep.sh
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -qx "tree ok on node1"
  echo "$LAST_OUTPUT" | grep -qx "tree ok on node2"
  [ "$(echo "$LAST_OUTPUT" | grep -c '^stagehand: node[12]: copied .*/tree -> .*/tree: 1 files, .* (no cache)$')" -eq 2 ]
  ! echo "$LAST_OUTPUT" | grep -q 'broadcast' || false
}

@test "when sbcast cannot run, the waiting node says so in one line and reads the source itself" {
  script nosbcast.sh <<'EOF2'
#!/bin/bash
# The reader's sbcast comes from the task's PATH: none here.
SRUN=$(command -v srun)
PATH=/nonexistent "$SRUN" -N2 --ntasks-per-node=1 --stage-data=bshared/small.tar.gz:small /bin/bash -c '
  PATH=/usr/bin:/bin
  cmp <(seq 1 100000) "$SLURM_TMPDIR/small/s/numbers.txt" && echo "small ok on $SLURMD_NODENAME"'
EOF2
  submit -N2 nosbcast.sh
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -qx "small ok on node1"
  echo "$LAST_OUTPUT" | grep -qx "small ok on node2"
  echo "$LAST_OUTPUT" | grep -q '^stagehand: node1: --stage-data: the broadcast of .*small.tar.gz failed (sbcast: cannot run sbcast: No such file or directory); every node reads the sources itself$'
  echo "$LAST_OUTPUT" | grep -q '^stagehand: node2: --stage-data: no broadcast arrived from the step.s first node within 30 s; reading the sources on this node$'
}

# A step wider than the one that staged first: the new step's first node has staged these specs
# already (it staged alone), and the other node must not wait for a broadcast nobody sends.
@test "a step whose first node staged the same --stage-data in an earlier step tells the other node at once" {
  script wider.sh <<'EOF2'
#!/bin/bash
srun -N1 -w node1 --stage-data=bshared/small.tar.gz:small true
srun -N2 --ntasks-per-node=1 --stage-data=bshared/small.tar.gz:small bash -c '
  cmp <(seq 1 100000) "$SLURM_TMPDIR/small/s/numbers.txt" && echo "small ok on $SLURMD_NODENAME"
  ls -A "$SLURM_TMPDIR" | grep -q "^\.stagehand-bcast" || echo "no copy left on $SLURMD_NODENAME"'
srun -N2 --ntasks-per-node=1 --stage-data=bshared/small.tar.gz:small bash -c '
  ls -A "$SLURM_TMPDIR" | grep -q "^\.stagehand-bcast" || echo "still no copy on $SLURMD_NODENAME"'
EOF2
  submit -N2 wider.sh
  [ "$JOB_RC" -eq 0 ]
  for n in node1 node2; do
    echo "$LAST_OUTPUT" | grep -qx "small ok on $n"
    echo "$LAST_OUTPUT" | grep -qx "no copy left on $n"
    echo "$LAST_OUTPUT" | grep -qx "still no copy on $n"
  done
  ! echo "$LAST_OUTPUT" | grep -q 'no broadcast arrived' || false
  # node1 staged in the first step; node2 reads the source itself, told so by node1.
  [ "$(echo "$LAST_OUTPUT" | grep -c '^stagehand: node1: unpacked .*small.tar.gz')" -eq 1 ]
  echo "$LAST_OUTPUT" | grep -Eq '^stagehand: node2: unpacked .*/small.tar.gz -> .*/small: 2 files, .* s \(no cache\)$'
  # Told once: the third step's nodes were all reached by the second's, so nothing is sent then.
  [ "$(markers_sent none)" -eq 2 ]
  [ "$(markers_sent done)" -eq 0 ]
}

# The reverse: the wider step's first node has not staged, so it reads and broadcasts to both, and
# node2, which staged alone before, takes no part: the copy sbcast left it is removed by its next
# staging of the specs (a later step's), not kept beside the job's data.
@test "a broadcast's copy that reaches a node which staged the specs before is removed at its next step" {
  script wider2.sh <<'EOF2'
#!/bin/bash
srun -N1 -w node2 --stage-data=bshared/small.tar.gz:small true
srun -N2 --ntasks-per-node=1 --stage-data=bshared/small.tar.gz:small bash -c '
  cmp <(seq 1 100000) "$SLURM_TMPDIR/small/s/numbers.txt" && echo "small ok on $SLURMD_NODENAME"'
srun -N2 --ntasks-per-node=1 --stage-data=bshared/small.tar.gz:small bash -c '
  ls -A "$SLURM_TMPDIR" | grep -q "^\.stagehand-bcast" || echo "no copy left on $SLURMD_NODENAME"'
EOF2
  submit -N2 wider2.sh
  [ "$JOB_RC" -eq 0 ]
  for n in node1 node2; do
    echo "$LAST_OUTPUT" | grep -qx "small ok on $n"
    echo "$LAST_OUTPUT" | grep -qx "no copy left on $n"
  done
  echo "$LAST_OUTPUT" | grep -q '^stagehand: node1: unpacked .*small.tar.gz -> .* read once, broadcast by sbcast in [0-9.]* s (no cache)$'
  ! echo "$LAST_OUTPUT" | grep -q 'no broadcast arrived' || false
  [ "$(markers_sent done)" -eq 2 ] # the second step's, to its two nodes; the third sends none
  [ "$(markers_sent none)" -eq 0 ]
}

# Issue 25, item 1: the node cache and the read-once broadcast compose. Each node's daemon stages
# its hits and reports its misses; the job broadcasts those (one read of shared storage for the
# job) and each daemon stages from its node's copy, filling its cache from it. The copy passed
# through the user's hands: its entry serves that user's later jobs only.
@test "with a daemon on each node a cold two-node job reads once, both caches fill from the copies, and the user's next job hits on both" {
  other=${STAGEHAND_TEST_USER}-2
  id "$other" >/dev/null 2>&1 || useradd --create-home "$other"
  cp "$WORK/bc-src/small.tar.gz" "$WORK/bc-src/d.tar.gz" # a new inode: a miss on both nodes
  chown "$STAGEHAND_TEST_USER:" "$WORK/bc-src/d.tar.gz"
  settle "$WORK/bc-src/d.tar.gz"
  for n in node1 node2; do "$CLUSTER" daemon-start "$n"; done # in the nodes' namespaces
  script dcheck.sh <<'EOF2'
#!/bin/bash
srun -N2 --ntasks-per-node=1 bash -c '
  cmp <(seq 1 100000) "$SLURM_TMPDIR/d/s/numbers.txt" && echo "d ok on $SLURMD_NODENAME"
  echo more >>"$SLURM_TMPDIR/d/s/numbers.txt" && echo "d writable on $SLURMD_NODENAME"
  ls -A "$SLURM_TMPDIR" | grep -q "^\.stagehand-bcast" || echo "no copy left on $SLURMD_NODENAME"'
EOF2
  size=$(stat -c %s "$WORK/bc-src/d.tar.gz")
  # run_dcheck WHAT: the 2-node job; `read` the bytes shared storage served; each node's content
  # right, changeable, and no broadcast copy left.
  run_dcheck() {
    submit_counted -N2 --stage-data=bshared/d.tar.gz:d dcheck.sh
    echo "$1: shared storage read $read bytes for a $size-byte archive on 2 nodes with a daemon each"
    [ "$JOB_RC" -eq 0 ]
    for n in node1 node2; do
      echo "$LAST_OUTPUT" | grep -qx "d ok on $n"
      echo "$LAST_OUTPUT" | grep -qx "d writable on $n"
      echo "$LAST_OUTPUT" | grep -qx "no copy left on $n"
    done
  }
  run_dcheck cold
  echo "$LAST_OUTPUT" | grep -Eq '^stagehand: node1: unpacked .*/d.tar.gz -> .*/d: 2 files, .* s, read once, broadcast by sbcast in [0-9.]+ s \(cache miss\)$'
  echo "$LAST_OUTPUT" | grep -Eq '^stagehand: node2: unpacked .*/d.tar.gz -> .*/d: 2 files, .* s, from the broadcast \(sbcast\)(, waited [0-9.]+ s)? \(cache miss\)$'
  [ "$read" -le $(( size * 105 / 100 )) ]
  cached node1 d.tar.gz
  cached node2 d.tar.gz

  # The same user again, on both nodes: two hits, nothing read but the probes, nobody waits.
  run_dcheck warm
  for n in node1 node2; do
    echo "$LAST_OUTPUT" | grep -Eq "^stagehand: $n: [a-z]+ .*/d.tar.gz -> .*/d: 2 files, .*\(cache hit\)$"
  done
  ! echo "$LAST_OUTPUT" | grep -q 'waited' || false
  [ "$read" -le $(( size / 20 )) ]

  # Another user's job: the entries filled from this user's copies are not theirs. It reads the
  # source itself (a miss), and gets the source's bytes.
  rm -f /tmp/bcast-other.out
  before=$(bytes_read)
  runuser -u "$other" -- env SLURM_CONF="$SLURM_CONF" PATH="${STAGEHAND_SLURM_BIN:-/usr/bin}:/usr/bin:/bin" \
    bash -c "cd /tmp && sbatch --wait -N1 -w node2 -o /tmp/bcast-other.out --stage-data='$WORK/bshared/d.tar.gz:d' \
      --wrap 'seq 1 100000 | cmp - \"\$SLURM_TMPDIR/d/s/numbers.txt\" && echo other ok'"
  cat /tmp/bcast-other.out
  grep -qx "other ok" /tmp/bcast-other.out
  grep -Eq '^stagehand: node2: unpacked .*/d.tar.gz -> .*/d: 2 files, .*\(cache miss\)$' /tmp/bcast-other.out
  [ $(( $(bytes_read) - before )) -ge "$size" ]
  for n in node1 node2; do "$CLUSTER" daemon-stop "$n"; done
}

# A copy is the source as the reader read it: a node that stages later, after the source was
# rewritten (same size, in place), reads the source itself, so it never stages nor caches the older
# bytes under the newer identity (its daemon would then serve them to the user's next job as a hit).
@test "a node staging after its source was rewritten reads the source, not the job's older broadcast copy" {
  head -c 4M /dev/urandom >"$WORK/bc-src/w.bin"
  chown "$STAGEHAND_TEST_USER:" "$WORK/bc-src/w.bin"
  settle "$WORK/bc-src/w.bin"
  for n in node1 node2; do "$CLUSTER" daemon-start "$n"; done
  script rewrite.sh <<'EOF2'
#!/bin/bash
echo "old $(sha256sum <"$SLURM_TMPDIR/w.bin")"
head -c 4M /dev/urandom >"$SLURM_SUBMIT_DIR/bc-src/w.bin" # same size, in place
sleep 3 # past the cache's racy window: the rewritten source may be cached
echo "new $(sha256sum <"$SLURM_SUBMIT_DIR/bc-src/w.bin")"
srun -N1 -w node2 bash -c 'echo "node2 $(sha256sum <"$SLURM_TMPDIR/w.bin")"'
EOF2
  submit -N2 --stage-data=bshared/w.bin:w.bin rewrite.sh
  [ "$JOB_RC" -eq 0 ]
  old=$(echo "$LAST_OUTPUT" | sed -n 's/^old \([0-9a-f]*\).*/\1/p')
  new=$(echo "$LAST_OUTPUT" | sed -n 's/^new \([0-9a-f]*\).*/\1/p')
  [ -n "$old" ]
  [ -n "$new" ]
  [ "$old" != "$new" ]
  echo "$LAST_OUTPUT" | grep -qx "node2 $new  -"
  echo "$LAST_OUTPUT" | grep -q '^stagehand: node2: --stage-data: .*/bshared/w.bin changed since it was broadcast; reading it here$'
  # The user's next job on node2 gets the source as it is now, from the cache or not.
  script again.sh <<'EOF2'
#!/bin/bash
echo "again $(sha256sum <"$SLURM_TMPDIR/w.bin")"
EOF2
  submit -N1 -w node2 --stage-data=bshared/w.bin:w.bin again.sh
  for n in node1 node2; do "$CLUSTER" daemon-stop "$n"; done
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -qx "again $new  -"
}

# With a daemon on each node the step's first node asks its daemon first for what it holds: for its
# file sources alone, so that its broadcast starts before it reads a directory (here held until the
# other node's task starts, which it can only do once the broadcast reached it). Before, the
# directory came first and the other node gave up after 30 s and read the archive itself.
@test "the first node broadcasts its file sources before it reads a directory, and the other node does not give up" {
  for n in node1 node2; do "$CLUSTER" daemon-start "$n"; done
  rm -f "$WORK/holdctl/flag"
  submit -N1 -w node2 --stage-data=bhold/hdir:hdir --wrap true # node2's cache holds the directory
  [ "$JOB_RC" -eq 0 ]
  cached node2 hdir
  cp "$WORK/bc-src/small.tar.gz" "$WORK/bc-src/h.tar.gz" # a miss on both nodes
  chown "$STAGEHAND_TEST_USER:" "$WORK/bc-src/h.tar.gz"
  settle "$WORK/bc-src/h.tar.gz"
  script first.sh <<'EOF2'
#!/bin/bash
srun -N2 --ntasks-per-node=1 --stage-data=bhold/hdir:hdir,bshared/h.tar.gz:h bash -c '
  [ "$SLURMD_NODENAME" = node2 ] && rm -f "$SLURM_SUBMIT_DIR/holdctl/flag"
  cmp <(seq 1 100000) "$SLURM_TMPDIR/h/s/numbers.txt" && echo "h ok on $SLURMD_NODENAME"
  cmp "$SLURM_SUBMIT_DIR/bc-hold-src/hdir/f" "$SLURM_TMPDIR/hdir/f" && echo "hdir ok on $SLURMD_NODENAME"'
EOF2
  touch "$WORK/holdctl/flag"
  (sleep 90 && rm -f "$WORK/holdctl/flag") >/dev/null 2>&1 & # never a hung test, whatever happens
  safety=$!
  submit -N2 first.sh
  rm -f "$WORK/holdctl/flag"
  kill "$safety" 2>/dev/null || true
  for n in node1 node2; do "$CLUSTER" daemon-stop "$n"; done
  [ "$JOB_RC" -eq 0 ]
  for n in node1 node2; do
    echo "$LAST_OUTPUT" | grep -qx "h ok on $n"
    echo "$LAST_OUTPUT" | grep -qx "hdir ok on $n"
  done
  ! echo "$LAST_OUTPUT" | grep -q 'no broadcast arrived' || false
  echo "$LAST_OUTPUT" | grep -Eq '^stagehand: node2: unpacked .*/h.tar.gz -> .*/h: 2 files, .* from the broadcast \(sbcast\)(, waited [0-9.]+ s)? \(cache miss\)$'
}

@test "with the per-node (%n) layout nodes read for themselves, as the slurmd log says once" {
  for n in node1 node2; do "$CLUSTER" node-restart "$n"; done
  TMPDIR_BASE="" set_tmpdir_config ""
  grep -q 'broadcast: \[tmpdir\] base ".*%n" differs per node' "$STAGEHAND_CLUSTER_DIR/log/slurmd-node1.log"
  logged=$(grep -c 'differs per node' "$STAGEHAND_CLUSTER_DIR/log/slurmd-node1.log")
  write_check
  size=$(stat -c %s "$WORK/bc-src/big.tar")
  submit_counted -N2 --stage-data=bshared/big.tar:big check-nodes.sh
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -qx "content ok on node1"
  echo "$LAST_OUTPUT" | grep -qx "content ok on node2"
  ! echo "$LAST_OUTPUT" | grep -q 'broadcast' || false
  [ "$read" -ge $(( size * 2 )) ]
  [ "$(grep -c 'differs per node' "$STAGEHAND_CLUSTER_DIR/log/slurmd-node1.log")" -eq "$logged" ] # not per job
}
