#!/usr/bin/env bats
# Slurm's per-job private directories (namespace/tmpfs from 25.11, job_container/tmpfs before;
# PrologFlags=Contain): every job runs in a mount namespace of its own with a private copy of each
# directory in job_container.conf's Dirs. stagehand's directories lie beside them (the default
# base, /local/stagehand, is not in Dirs): every option works as without the plugin. A base inside
# Dirs cannot work (the prolog makes the directory where the job cannot see it): slurmd says so
# when it starts, and a --tmpdir job fails with that line.
#
# requires: Slurm >= 23.02 (job_container.conf's Dirs=: the test cluster's own files may lie under
# /tmp or /dev/shm, the default Dirs; tests/cluster/files_for.sh leaves this file out before 23.02)

load helpers

slurm_release() { sinfo -V | awk '{ split($2, v, "."); print v[1] * 100 + v[2] }'; }

setup_file() {
  if [ "$(slurm_release)" -lt 2302 ]; then
    echo "namespace_tmpfs.bats needs Slurm 23.02 or later (job_container.conf Dirs=); this cluster runs $(sinfo -V)" >&2
    return 1
  fi
  "$STAGEHAND_SOURCE_DIR/tests/cluster/cluster.sh" namespace tmpfs
  W=$STAGEHAND_CLUSTER_DIR/work
  install -m 0644 "$STAGEHAND_SOURCE_DIR/examples/ddp_python/allreduce.py" "$W/"
  rm -rf "$W/ns-src" "$W/ns.tar.gz" "$W/ns-dest"
  mkdir -p "$W/ns-src/d" "$W/ns-dest"
  head -c 300000 /dev/urandom >"$W/ns-src/d/shard.bin"
  printf weights >"$W/ns-src/d/ckpt.pt"
  tar -C "$W/ns-src" -czf "$W/ns.tar.gz" d
  chown -R "$STAGEHAND_TEST_USER:" "$W/ns-src" "$W/ns.tar.gz" "$W/ns-dest"
  settle "$W/ns.tar.gz"
}

teardown_file() {
  "$STAGEHAND_SOURCE_DIR/tests/cluster/cluster.sh" namespace none
}

PRIVATE=$STAGEHAND_CLUSTER_DIR/private

@test "namespace/tmpfs: --tmpdir beside the private directories works on both nodes, each job has its own private ones, and the directory goes" {
  script ns-tmpdir.sh <<SCRIPT
#!/bin/bash
echo "batch ns \$(readlink /proc/self/ns/mnt) private \$(ls -A $PRIVATE | wc -l)"
echo mine >$PRIVATE/mine
srun -N2 --ntasks-per-node=1 bash -c 'echo "step \$SLURMD_NODENAME \$(stat -c "%U %a" "\$SLURM_TMPDIR") \$(ls -A $PRIVATE | tr "\n" " ")"; echo x >"\$SLURM_TMPDIR/x" && echo "wrote \$SLURMD_NODENAME"'
SCRIPT
  submit -N2 --tmpdir ns-tmpdir.sh
  [ "$JOB_RC" -eq 0 ]
  # The job ran in a mount namespace of its own, with an empty private directory of its own.
  echo "$LAST_OUTPUT" | grep -q "^batch ns mnt:\[[0-9]*\] private 0$"
  ! echo "$LAST_OUTPUT" | grep -qF "batch ns $(readlink /proc/self/ns/mnt) " || false
  [ ! -e "$PRIVATE/mine" ]
  echo "$LAST_OUTPUT" | grep -qx "step node1 $STAGEHAND_TEST_USER 700 mine "
  echo "$LAST_OUTPUT" | grep -qx "step node2 $STAGEHAND_TEST_USER 700 "
  echo "$LAST_OUTPUT" | grep -qx "wrote node1"
  echo "$LAST_OUTPUT" | grep -qx "wrote node2"
  [ ! -e "$(job_dir node1 "$JOB_ID")" ]
  [ ! -e "$(job_dir node2 "$JOB_ID")" ]
}

@test "namespace/tmpfs: --stage-data through the daemon (a miss, then a hit shown as views), --ddp-env all_reduce, --stage-out; no mount outlives the jobs" {
  script ns-stage.sh <<'SCRIPT'
#!/bin/bash
srun -N2 --ntasks-per-node=1 bash -c 'cmp "$SLURM_TMPDIR/data/d/shard.bin" ns-src/d/shard.bin && echo "same $SLURMD_NODENAME $(stat -c %U "$SLURM_TMPDIR/data/d/ckpt.pt")"; echo more >>"$SLURM_TMPDIR/data/d/ckpt.pt" && echo "appended $SLURMD_NODENAME"; mkdir -p "$SLURM_TMPDIR/out" && echo r >"$SLURM_TMPDIR/out/result"'
srun -N2 -n4 --ddp-env python3 allreduce.py
SCRIPT
  local j summary
  for j in 1 2; do
    submit -N2 -n4 --tmpdir --stage-data=ns.tar.gz:data "--stage-out=out:$WORK/ns-dest/j$j" ns-stage.sh
    [ "$JOB_RC" -eq 0 ]
    [ "$(echo "$LAST_OUTPUT" | grep -c "^same node[12] $STAGEHAND_TEST_USER$")" -eq 2 ]
    [ "$(echo "$LAST_OUTPUT" | grep -c "^appended node[12]$")" -eq 2 ]
    [ "$(echo "$LAST_OUTPUT" | grep -c "world=4 .*sum=10 ok=True")" -eq 4 ]
    # (the daemon copies after the job)
    for _ in $(seq 1 120); do [ ! -s "$WORK/ns-dest/j$j/result" ] || break; sleep 0.5; done
    [ "$(cat "$WORK/ns-dest/j$j/result")" = r ]
    summary=$(echo "$LAST_OUTPUT" | grep '^stagehand: node1: unpacked')
    if [ "$j" -eq 1 ]; then
      [[ "$summary" == *"(cache miss)" ]]
      cached node1 ns.tar.gz
      cached node2 ns.tar.gz
    else
      [[ "$summary" == *"shown as your own files (cache view) (cache hit)" ]]
    fi
  done
  # The views were mounted in the jobs' namespaces: none is left on the node, nor anything of the
  # jobs below the scratch bases or in namespace/tmpfs's BasePath.
  [ -z "$(findmnt -rn -o TARGET | grep -F "$SCRATCH/" || true)" ]
  for _ in $(seq 1 100); do [ -n "$(ls -A "$SCRATCH/node1" "$SCRATCH/node2" | grep job_)" ] || break; sleep 0.2; done
  [ -z "$(ls -A "$SCRATCH/node1" "$SCRATCH/node2" | grep job_ || true)" ]
  # Slurm unmounts a job's namespace after the epilog (which removed the job directories above):
  # given as long to go.
  local ns_base left
  ns_base=$(cat "$STAGEHAND_CLUSTER_DIR/etc/ns-base")
  for _ in $(seq 1 100); do
    left=$(findmnt -rn -o TARGET | grep -F "$ns_base/" || true)
    [ -n "$left" ] || break
    sleep 0.2
  done
  echo "left under $ns_base: ${left:-nothing}"
  [ -z "$left" ]
}

@test "namespace/tmpfs: a base inside Dirs: slurmd says so when it starts; a --tmpdir job fails with that one line; no drain" {
  TMPDIR_BASE="$PRIVATE/stagehand/%n" set_tmpdir_config ""
  "$STAGEHAND_SOURCE_DIR/tests/cluster/cluster.sh" node-restart node1
  local line="[tmpdir] base \"$PRIVATE/stagehand/%n\" lies in $PRIVATE, which Slurm's namespace/tmpfs makes private to each job (job_container.conf Dirs): jobs cannot see their directories there; set base outside Dirs (beside them, e.g. /local/stagehand)"
  grep -qF "error: stagehand: $line" "$STAGEHAND_CLUSTER_DIR/log/slurmd-node1.log"
  submit -N1 -w node1 --tmpdir --wrap "'echo ran'"
  [ "$JOB_RC" -ne 0 ]
  ! echo "$LAST_OUTPUT" | grep -q '^ran$' || false
  [ "$(echo "$LAST_OUTPUT" | grep -c 'stagehand:')" -eq 1 ]
  echo "$LAST_OUTPUT" | grep -qF "stagehand: --tmpdir: no scratch directory on node node1: $line"
  # Without --tmpdir, jobs run as ever.
  submit -N1 -w node1 --wrap "'echo ran'"
  [ "$JOB_RC" -eq 0 ]
  echo "$LAST_OUTPUT" | grep -qx ran
  set_tmpdir_config ""
  "$STAGEHAND_SOURCE_DIR/tests/cluster/cluster.sh" node-restart node1
}
