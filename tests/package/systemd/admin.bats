#!/usr/bin/env bats
# The .deb as an admin runs it, under real systemd: run by scripts/ci/package-systemd.sh INSIDE the
# guest it boots (Debian's systemd as PID 1, the root a throw-away overlay of the host's), as a
# unit of the guest. Never run this on a machine of your own: it installs and purges the package,
# rewrites /etc/slurm/slurm.conf, starts Slurm and adds a user.
# The tests run in order and build on each other: install, Slurm, the daemon and the user are set
# up by the first four; a later test whose setup failed says which step it needs.

load helpers

@test "apt-get install the .deb: service user, /run/stagehand, stagehandd installed disabled" {
  export DEBIAN_FRONTEND=noninteractive
  if [ "$(dpkg-query -W -f='${Status}' stagehand 2>/dev/null)" = "install ok installed" ]; then
    apt-get purge -y -q stagehand # installed on the host whose root the guest shows
  fi
  run apt-get install -y -q "$STAGEHAND_GUEST_DEB"
  echo "$output" | tail -n 15
  [ "$status" -eq 0 ]
  dpkg -L stagehand >"$STATE/files"
  getent passwd stagehand
  [ -d /run/stagehand ]
  run systemctl is-enabled stagehandd
  [ "$output" = disabled ]
  run systemctl is-active stagehandd
  [ "$output" = inactive ]
  /usr/bin/stagehand check-config "$CONFIG"
  note "installed $(dpkg-query -W -f='${Package} ${Version}' stagehand); stagehandd.service disabled, inactive"
  touch "$STATE/installed.done"
}

@test "one-node Slurm from Debian's units (munge, slurmctld, slurmd), plugin enabled by the package's drop-in" {
  need installed
  # Ports 48817.. (the host's test clusters use 46817..47500; the guest has a network of its own
  # anyway), reserved in the guest's network namespace (guest-init.sh).
  cat >/etc/slurm/slurm.conf <<CONF
# One-node cluster of the systemd guest (tests/package/systemd/admin.bats).
ClusterName=shguest
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=48817
SlurmdPort=48818
SlurmUser=slurm
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
MpiParams=ports=48830-48899
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerParameters=sched_interval=1
PrologFlags=Alloc
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=3
MinJobAge=600
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
CONF
  chmod 0644 /etc/slurm/slurm.conf
  # On a host with cgroup v1 hierarchies mounted (a hybrid host, as CI's sandbox is), the guest's
  # processes are still listed in them (/proc/self/cgroup), and slurmd's autodetection, seeing its
  # cgroup2 /sys/fs/cgroup, stops with "Hybrid mode is not supported". The cluster uses no cgroup
  # plugin (proctrack/linuxproc, task/none): name the v1 one so that nothing is detected.
  rm -f /etc/slurm/cgroup.conf
  if grep -qv '^0::' /proc/self/cgroup; then
    echo "CgroupPlugin=cgroup/v1 # the host has cgroup v1 hierarchies (admin.bats)" >/etc/slurm/cgroup.conf
  fi
  # Debian's plugstack.conf includes the directory; the package's line ships commented out.
  grep -Eq '^include +/etc/slurm/plugstack\.conf\.d/\*' /etc/slurm/plugstack.conf
  grep -qx "#required $PLUGIN config=$CONFIG" /etc/slurm/plugstack.conf.d/stagehand.conf
  sed -i 's|^#required |required |' /etc/slurm/plugstack.conf.d/stagehand.conf
  grep -qx "required $PLUGIN config=$CONFIG" /etc/slurm/plugstack.conf.d/stagehand.conf
  systemctl start munge slurmctld slurmd
  local state='' end=$((SECONDS + 60))
  while [ "$SECONDS" -lt "$end" ]; do
    state=$(timeout 10 sinfo -h -n "$NODE" -o %T 2>/dev/null || true)
    [ "$state" != idle ] || break
    sleep 0.2
  done
  echo "node $NODE: '$state'"
  systemctl status --no-pager munge slurmctld slurmd | grep -E '^[^ ]|Active:' || true
  journalctl -u slurmctld -u slurmd --no-pager -o cat | tail -n 20
  [ "$state" = idle ]
  [ "$(systemctl is-active munge slurmctld slurmd | sort -u)" = active ]
  note "$(slurmd -V): munge, slurmctld, slurmd active; node $NODE idle; plugstack: $(grep -v '^#' /etc/slurm/plugstack.conf.d/stagehand.conf)"
  touch "$STATE/slurm.done"
}

@test "systemctl enable --now stagehandd: enabled, active, stagehand status answers" {
  need installed
  systemctl enable --now stagehandd
  run systemctl is-enabled stagehandd
  [ "$output" = enabled ]
  run systemctl is-active stagehandd
  [ "$output" = active ]
  run stagehand status
  echo "$output"
  [ "$status" -eq 0 ]
  [[ "$output" == *"node $NODE"* ]]
  note "stagehandd: $(systemctl is-enabled stagehandd), $(systemctl is-active stagehandd), MainPID $(systemctl show -p MainPID --value stagehandd)"
  touch "$STATE/daemon.done"
}

@test "an ordinary user with a home under /home, and a dataset (a tar.gz) in it" {
  useradd --create-home --home-dir "$USER_HOME" --shell /bin/bash "$TEST_USER"
  install -d -o "$TEST_USER" -g "$TEST_USER" "$WORKDIR"
  as_user bash -c 'mkdir -p data/tree/sub && echo hello >data/tree/sub/a.txt &&
    head -c 300000 /dev/urandom >data/tree/blob.bin && tar czf data/tree.tar.gz -C data/tree .'
  [ "$(stat -c %U "$USER_HOME")" = "$TEST_USER" ]
  [ -s "$WORKDIR/data/tree.tar.gz" ]
  touch "$STATE/user.done"
}

@test "--tmpdir: the job's own directory, owned by the user, removed when the job ends" {
  need slurm
  need user
  submit tmpdir --tmpdir <<'EOF'
#!/bin/bash
echo "tmpdir $SLURM_TMPDIR $(stat -c '%U %a' "$SLURM_TMPDIR") TMPDIR=$TMPDIR"
touch "$SLURM_TMPDIR/scratch-file"
EOF
  [ "$JOB_STATE" = COMPLETED ]
  local dir=/local/stagehand/job_$JOB_ID
  echo "$LAST_OUTPUT" | grep -qx "tmpdir $dir $TEST_USER 700 TMPDIR=$dir"
  for _ in $(seq 1 100); do
    [ -e "$dir" ] || break
    sleep 0.2
  done
  [ ! -e "$dir" ]
  note "$(echo "$LAST_OUTPUT" | grep '^tmpdir '); gone after the job"
}

# settle FILE: waits until FILE last changed more than 2 s ago: the daemon stages a source modified
# within 2 s of its staging "(no cache)" (its racy-source rule), never a miss.
settle() {
  while [ "$(($(date +%s) - $(stat -c %Z "$1")))" -lt 3 ]; do sleep 0.2; done
}

# stage_tar NAME TAR OUTCOME: job NAME stages TAR (a copy of data/tree.tar.gz; absolute, or under
# ~/work) to $SLURM_TMPDIR/tree; the content must be data/tree's and the summary line TAR's,
# ending "(OUTCOME)".
stage_tar() {
  local shown=$2
  [[ "$shown" == /* ]] || shown=$WORKDIR/$2
  submit "$1" --stage-data="$2:tree" <<'EOF'
#!/bin/bash
diff -r "$SLURM_SUBMIT_DIR/data/tree" "$SLURM_TMPDIR/tree" && echo "staged ok"
EOF
  [ "$JOB_STATE" = COMPLETED ]
  echo "$LAST_OUTPUT" | grep -qx "staged ok"
  echo "$LAST_OUTPUT" | grep -F "stagehand: $NODE: unpacked $shown -> /local/stagehand/job_$JOB_ID/tree: " |
    grep -q " ($3)\$"
  note "$(echo "$LAST_OUTPUT" | grep '^stagehand: ')"
}

@test "--stage-data of a tar: the first job fills the node cache (cache miss)" {
  need slurm
  need daemon
  need user
  settle "$WORKDIR/data/tree.tar.gz"
  stage_tar stage_miss data/tree.tar.gz "cache miss"
  echo "$JOB_ID" >"$STATE/miss.job"
}

@test "--stage-data of the same tar again: served by the daemon from its cache (cache hit)" {
  need slurm
  need daemon
  need user
  stage_tar stage_hit data/tree.tar.gz "cache hit"
  echo "$JOB_ID" >"$STATE/hit.job"
  # How the hit was shown (a view, or links and why): the plugin's slurmd lines.
  { journalctl -u slurmd --no-pager 2>/dev/null; cat /var/log/slurm/slurmd.log 2>/dev/null; } | grep -F 'cache views' | tail -n 3 | sed 's/^/# /' >&3 || true
  grep -F "$WORKDIR/data/tree.tar.gz" "$WORKDIR/slurm-$JOB_ID.out" || true
  run stagehand status --json
  [ "$(jq .cache.hits <<<"$output")" -ge 1 ]
}

@test "--stage-data of a tar under the host's /tmp: staged through the daemon's cache like any other path" {
  need slurm
  need daemon
  need user
  as_user bash -c 'mkdir -p /tmp/shuser-data && cp data/tree.tar.gz /tmp/shuser-data/t.tar.gz'
  settle /tmp/shuser-data/t.tar.gz
  stage_tar stage_tmp /tmp/shuser-data/t.tar.gz "cache miss"
}

@test "--ddp-env: RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT exported" {
  need slurm
  need user
  submit ddp --ddp-env <<'EOF'
#!/bin/bash
srun bash -c 'echo "ddp rank=$RANK local_rank=$LOCAL_RANK world=$WORLD_SIZE master=$MASTER_ADDR:$MASTER_PORT"'
EOF
  [ "$JOB_STATE" = COMPLETED ]
  local line port
  line=$(echo "$LAST_OUTPUT" | grep '^ddp ')
  [[ "$line" =~ ^ddp\ rank=0\ local_rank=0\ world=1\ master=$NODE:([0-9]+)$ ]]
  port=${BASH_REMATCH[1]}
  # From the step's reserved ports (MpiParams=ports=48830-48899).
  [ "$port" -ge 48830 ]
  [ "$port" -le 48899 ]
  note "$line"
}

# stage_out_job NAME DEST: a job that leaves out/result.txt and out/sub/b.txt in SLURM_TMPDIR,
# with --stage-out=out:DEST; then waits for the copy.
stage_out_job() {
  submit "$1" --stage-out="out:$2" <<'EOF'
#!/bin/bash
mkdir -p "$SLURM_TMPDIR/out/sub"
echo "result of job $SLURM_JOB_ID" >"$SLURM_TMPDIR/out/result.txt"
echo nested >"$SLURM_TMPDIR/out/sub/b.txt"
EOF
}

# check_arrived JOB DEST: DEST holds the job's out/ (content), everything in it owned by the user,
# a line in DEST/.stagehand-stage-out.log, and the job's directory is gone from the node.
check_arrived() {
  local job=$1 dest=$2
  wait_stage_out "$job" "$dest/.stagehand-stage-out.log"
  echo "DEST $dest:"
  ls -laR "$dest" 2>&1 || true
  cat "$dest/.stagehand-stage-out.log" 2>/dev/null || true
  echo "submit directory's log:"
  cat "$WORKDIR/.stagehand-stage-out.log" 2>/dev/null || true
  echo "base:"
  ls -la /local/stagehand 2>&1 || true
  [ "$(cat "$dest/result.txt")" = "result of job $job" ]
  [ "$(cat "$dest/sub/b.txt")" = nested ]
  [ -z "$(find "$dest" ! -user "$TEST_USER")" ]
  grep -Eq "job $job node $NODE: out -> $dest: " "$dest/.stagehand-stage-out.log"
  note "$(tail -n 1 "$dest/.stagehand-stage-out.log"); owned by $(stat -c %U "$dest/result.txt")"
  for _ in $(seq 1 100); do
    [ -n "$(job_entries "$job")" ] || break
    sleep 0.2
  done
  [ -z "$(job_entries "$job")" ]
}

@test "--stage-out into \$HOME: the files arrive, owned by the user" {
  need slurm
  need daemon
  need user
  stage_out_job out_home "$USER_HOME/results/%j"
  [ "$JOB_STATE" = COMPLETED ]
  check_arrived "$JOB_ID" "$USER_HOME/results/$JOB_ID"
}

@test "--stage-out into /tmp: the files arrive, owned by the user" {
  need slurm
  need daemon
  need user
  stage_out_job out_tmp "/tmp/$TEST_USER-results/%j"
  [ "$JOB_STATE" = COMPLETED ]
  check_arrived "$JOB_ID" "/tmp/$TEST_USER-results/$JOB_ID"
}

@test "--stage-out of a job cancelled mid-run with scancel: the results still arrive" {
  need slurm
  need daemon
  need user
  cat >"$WORKDIR/cancel.sh" <<'EOF'
#!/bin/bash
mkdir -p "$SLURM_TMPDIR/out/sub"
echo "result of job $SLURM_JOB_ID" >"$SLURM_TMPDIR/out/result.txt"
echo nested >"$SLURM_TMPDIR/out/sub/b.txt"
echo checkpoint written
sleep 300
EOF
  chown "$TEST_USER:" "$WORKDIR/cancel.sh"
  JOB_ID=$(as_user sbatch --parsable -o "slurm-%j.out" --stage-out="out:$USER_HOME/cancelled/%j" cancel.sh)
  for _ in $(seq 1 300); do
    if grep -qx "checkpoint written" "$WORKDIR/slurm-$JOB_ID.out" 2>/dev/null; then break; fi
    sleep 0.2
  done
  grep -qx "checkpoint written" "$WORKDIR/slurm-$JOB_ID.out"
  as_user scancel "$JOB_ID"
  wait_job "$JOB_ID"
  echo "job $JOB_ID: $JOB_STATE"
  [ "$JOB_STATE" = CANCELLED ]
  check_arrived "$JOB_ID" "$USER_HOME/cancelled/$JOB_ID"
}

@test "under the unit the daemon sees a running job's slurmstepd: with slurmctld stopped and its own registry gone, the job is running and GC keeps its directory" {
  need slurm
  need daemon
  need user
  printf '#!/bin/bash\necho running\nsleep 300\n' >"$WORKDIR/long.sh"
  chown "$TEST_USER:" "$WORKDIR/long.sh"
  JOB_ID=$(as_user sbatch --parsable -o "slurm-%j.out" --tmpdir long.sh)
  for _ in $(seq 1 300); do
    if grep -qx running "$WORKDIR/slurm-$JOB_ID.out" 2>/dev/null; then break; fi
    sleep 0.2
  done
  grep -qx running "$WORKDIR/slurm-$JOB_ID.out"
  # The only evidence left is /proc: no registry (the daemon forgot the job), no slurmctld.
  systemctl stop stagehandd slurmctld
  rm -f /var/lib/stagehand/registry.json
  systemctl start stagehandd
  local seen rc=0
  seen=$(stagehand status --json) || rc=$?
  stagehand gc || true
  systemctl start slurmctld # (before any check: the later tests need it)
  echo "$seen"
  [ "$rc" -eq 0 ]
  [ "$(jq -r --argjson j "$JOB_ID" '.jobs[] | select(.job_id == $j) | .state' <<<"$seen")" = running ]
  [ -d "/local/stagehand/job_$JOB_ID" ]
  # slurmctld answers a moment after its unit is started (it reads its state first): asked at once,
  # ping says DOWN.
  for _ in $(seq 1 60); do
    if timeout 5 scontrol ping >/dev/null 2>&1; then break; fi
    sleep 0.5
  done
  timeout 30 scontrol ping
  as_user scancel "$JOB_ID"
  wait_job "$JOB_ID"
  note "job $JOB_ID seen running from its slurmstepd under ProtectProc=$(systemctl show -p ProtectProc --value stagehandd)"
}

@test "systemctl reload stagehandd: a new cache_max_bytes shows in stagehand status, same process" {
  need daemon
  sed -i 's|^cache_max_bytes = "[^"]*"|cache_max_bytes = "3G"|' "$CONFIG"
  grep -q '^cache_max_bytes = "3G"' "$CONFIG"
  stagehand check-config "$CONFIG"
  local pid
  pid=$(systemctl show -p MainPID --value stagehandd)
  run stagehand status
  [[ "$output" != *"of 3.0 GiB"* ]]
  systemctl reload stagehandd
  for _ in $(seq 1 50); do
    if timeout 10 stagehand status | grep -q "of 3.0 GiB"; then break; fi
    sleep 0.1
  done
  run stagehand status
  echo "$output"
  [[ "$output" == *"of 3.0 GiB"* ]]
  [ "$(systemctl show -p MainPID --value stagehandd)" = "$pid" ]
  [ "$(systemctl is-active stagehandd)" = active ]
  daemon_log | grep -Eq "reloaded $CONFIG\$"
  note "after reload: $(stagehand status | grep '^cache:'); same MainPID $pid"
}

@test "systemctl restart stagehandd during a cache fill of a bigger archive: the job still succeeds" {
  need slurm
  need daemon
  need user
  # 1 GiB of zeros in four files, gzip'd to a few MB: a few seconds to fill.
  as_user python3 - <<'EOF'
import io, tarfile
class Zeros(io.RawIOBase):
    def __init__(self, n): self.n = n
    def readable(self): return True
    def readinto(self, b):
        k = min(len(b), self.n); b[:k] = bytes(k); self.n -= k; return k
with tarfile.open("data/big.tar.gz", "w:gz", compresslevel=1) as t:
    for i in range(4):
        ti = tarfile.TarInfo(f"part{i}.bin"); ti.size = 256 << 20; ti.mode = 0o644
        t.addfile(ti, io.BufferedReader(Zeros(ti.size), 1 << 20))
EOF
  # Cacheable, so that there is a fill to restart under: a source changed within 2 s of its
  # staging is staged without the cache (the racy-source rule).
  while [ $(( $(date +%s) - $(stat -c %Z "$WORKDIR/data/big.tar.gz") )) -lt 3 ]; do sleep 0.2; done
  cat >"$WORKDIR/big.sh" <<'EOF'
#!/bin/bash
cd "$SLURM_TMPDIR/big" || exit 1
ok=0
for i in 0 1 2 3; do
  [ "$(stat -c %s part$i.bin)" -eq $((256 << 20)) ] && cmp -s part$i.bin <(head -c $((256 << 20)) /dev/zero) && ok=$((ok + 1))
done
echo "big: $ok of 4 parts ok"
EOF
  chown "$TEST_USER:" "$WORKDIR/big.sh"
  local pid before filling='' took
  before=$(systemctl show -p MainPID --value stagehandd)
  JOB_ID=$(as_user sbatch --parsable -o "slurm-%j.out" --stage-data=data/big.tar.gz:big big.sh)
  # The fill is under way: the daemon lists the staging, or its fill directory has something.
  for _ in $(seq 1 600); do
    if [ "$(timeout 10 stagehand status --json 2>/dev/null | jq '.stagings | length')" != 0 ] ||
      [ -n "$(ls -A /local/stagehand-cache/tmp 2>/dev/null)" ]; then
      filling=yes
      break
    fi
    if timeout 10 scontrol -o show job "$JOB_ID" | grep -Eq 'JobState=(COMPLETED|FAILED|CANCELLED)'; then break; fi
    sleep 0.1
  done
  stagehand status || true
  echo "fill seen under way: ${filling:-no}"
  [ "$filling" = yes ]
  SECONDS=0
  systemctl restart stagehandd
  took=$SECONDS
  echo "systemctl restart took ${took}s"
  pid=$(systemctl show -p MainPID --value stagehandd)
  [ "$pid" != "$before" ]
  [ "$(systemctl is-active stagehandd)" = active ]
  wait_job "$JOB_ID" 180
  cat "$WORKDIR/slurm-$JOB_ID.out"
  daemon_log | grep -F "job $JOB_ID" || true
  [ "$JOB_STATE" = COMPLETED ]
  grep -qx "big: 4 of 4 parts ok" "$WORKDIR/slurm-$JOB_ID.out"
  note "fill under way, restart took ${took}s (MainPID $before -> $pid); $(grep '^stagehand: ' "$WORKDIR/slurm-$JOB_ID.out" | tr '\n' ' ')"
  grep -Eq "^stagehand: $NODE: unpacked $WORKDIR/data/big\.tar\.gz -> .* \((cache miss|cache hit|no cache)\)\$" "$WORKDIR/slurm-$JOB_ID.out"
  [ "$(systemctl is-active stagehandd)" = active ]
  stagehand status
}

@test "journalctl -u stagehandd: start-up, the per-source timing lines of README, reload, stop" {
  need daemon
  local log miss hit
  log=$(daemon_log)
  echo "$log"
  miss=$(cat "$STATE/miss.job")
  hit=$(cat "$STATE/hit.job")
  # Two starts (enable --now, restart), each said.
  [ "$(grep -c "listening on /run/stagehand/stagehandd.sock (requests at once: [0-9]*, [0-9]* per user" <<<"$log")" -ge 2 ]
  grep -Eq "node $NODE: base /local/stagehand, cache /local/stagehand-cache " <<<"$log"
  # docs/admin-guide.md: "For each staged source it logs where the time went".
  grep -Eq "job $miss: $WORKDIR/data/tree\.tar\.gz \(cache miss\): [0-9.]+ s: identified in [0-9.]+ s, delivered in [0-9.]+ s, linked in [0-9.]+ s\$" <<<"$log"
  grep -Eq "job $hit: $WORKDIR/data/tree\.tar\.gz \(cache hit\): [0-9.]+ s: identified in [0-9.]+ s, found in [0-9.]+ s, linked in [0-9.]+ s\$" <<<"$log"
  grep -Eq "reloaded $CONFIG\$" <<<"$log"
  grep -Eq "SIGTERM: stopping\$" <<<"$log"
  # Under the unit the children's seccomp filter is taken and, where the kernel has Landlock ABI 2
  # (Linux 5.19, landlock in lsm=), the fills' Landlock rules too: the cache hit above was filled
  # by a child confined so.
  [ "$(grep -c "refuses the seccomp filter" <<<"$log")" = 0 ]
  local abi
  abi=$(python3 -c 'import ctypes; print(ctypes.CDLL(None).syscall(444, None, 0, 1))')
  if [ "$abi" -ge 2 ]; then
    [ "$(grep -c "no Landlock" <<<"$log")" = 0 ]
  else
    note "this kernel has no Landlock ABI 2 ($abi): the daemon's warning is expected, not checked"
  fi
  # systemd's own view: Type=notify reached, no failed start.
  [ "$(systemctl show -p NRestarts --value stagehandd)" = 0 ]
  [ "$(systemctl show -p Result --value stagehandd)" = success ]
  note "$(grep -c . <<<"$log") lines; e.g. $(grep -E "job $hit: .*\(cache hit\)" <<<"$log")"
}

@test "systemd-analyze security stagehandd: the exposure, at most 3.5" {
  need installed
  run systemd-analyze security --no-pager stagehandd
  echo "$output"
  [ "$status" -eq 0 ]
  local exposure
  exposure=$(sed -n 's/.*Overall exposure level for stagehandd.service: \([0-9.]*\) \([A-Z]*\).*/\1 \2/p' <<<"$output")
  echo "${exposure:-none}" >"$GUEST_DIR/exposure"
  [ -n "$exposure" ]
  awk -v e="${exposure%% *}" 'BEGIN { exit !(e <= 3.5) }'
  note "exposure $exposure"
}

@test "apt-get purge -y stagehand leaves nothing of the package" {
  need installed
  local left=() f busy
  # As an admin would: the node drained first (no job, no pending copy, no trash left).
  for _ in $(seq 1 150); do
    busy=$(timeout 10 stagehand status --json 2>/dev/null | jq '(.jobs | length) + .trash.entries' || true)
    [ "${busy:-0}" != 0 ] || break
    sleep 0.2
  done
  stagehand status || true
  run apt-get purge -y -q stagehand
  echo "$output" | tail -n 15
  [ "$status" -eq 0 ]
  while read -r f; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    # Directories shared with other packages (/usr, /etc/slurm, Slurm's plugin directory) stay.
    if [ -d "$f" ] && dpkg -S "$f" >/dev/null 2>&1; then continue; fi
    left+=("$f")
  done <"$STATE/files"
  for f in /var/lib/stagehand /run/stagehand /local/stagehand-cache /etc/slurm/stagehand.toml \
    /etc/slurm/plugstack.conf.d/stagehand.conf /etc/systemd/system/multi-user.target.wants/stagehandd.service; do
    [ ! -e "$f" ] || left+=("$f")
  done
  # The base goes when empty (job directories in it are users' data and stay).
  if [ -d /local/stagehand ]; then left+=("/local/stagehand (holding: $(ls -A /local/stagehand | tr '\n' ' '))"); fi
  if dpkg-query -W stagehand >/dev/null 2>&1; then left+=("dpkg still lists stagehand"); fi
  if pgrep -x stagehandd >/dev/null; then left+=("a stagehandd process"); fi
  if [ "$(systemctl is-active stagehandd)" != inactive ]; then left+=("stagehandd.service $(systemctl is-active stagehandd)"); fi
  echo "left: ${left[*]}"
  [ ${#left[@]} -eq 0 ]
  note "purged: none of the $(grep -c . "$STATE/files") packaged paths (but shared directories), no state, no unit, no process left"
}
