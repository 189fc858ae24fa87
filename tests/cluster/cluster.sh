#!/usr/bin/env bash
# A real local Slurm cluster for the tests: a private munged, slurmctld and two slurmd
# (node1, node2) on localhost, with stagehand.so in plugstack.conf.
#
#   cluster.sh start PLUGIN_SO   start everything with a copy of PLUGIN_SO, wait until both nodes
#                                are idle (the CLI, for --stage-data, is taken from PLUGIN_SO's
#                                build tree: ../helper/stagehand, passed as helper=)
#   cluster.sh start --installed PLUGIN_SO
#                                the same with an installed plugin used in place and no helper=,
#                                so it runs the CLI it was built for (the package check)
#   cluster.sh stop              stop everything this cluster started, remove its state
#   cluster.sh env               print the variables a client needs (eval "$(cluster.sh env)")
#   cluster.sh daemon-start NODE [PATH]  start stagehandd for NODE (the cluster starts one per
#                                node); with PATH, in a mount namespace of its own where PATH is an
#                                empty tmpfs (a path the daemon cannot see and the jobs can)
#   cluster.sh daemon-stop NODE [SIGNAL]   stop it (default TERM; KILL leaves its socket file)
#   cluster.sh node-start NODE | controller-start
#                                start a slurmd or slurmctld again that a test stopped
#   cluster.sh sweep             kill what names STAGEHAND_CLUSTER_DIR, detach mounts below it
#   cluster.sh namespace tmpfs|none
#                                Slurm's per-job private directories on or off (namespace/tmpfs
#                                from 25.11, job_container/tmpfs before; PrologFlags=Contain) and
#                                slurmctld and both slurmd restarted: no job may be running. The
#                                private directory (job_container.conf Dirs=) is $DIR/private: a
#                                site's is /tmp, but this cluster's own files may lie under /tmp
#   cluster.sh node-restart NODE [private]  restart NODE's slurmd; "private": in a mount namespace
#                                of its own with a private tmpfs at $SCRATCH/local, so that one
#                                path is node-local as on a real cluster (sbcast writes one path
#                                on every node); without it, in the host's namespace again
#
# STAGEHAND_CLUSTER_PROLOG=1 (at start): slurm.conf also gets Prolog=/Epilog= wrappers that run
# `stagehand prolog`/`stagehand epilog --config $DIR/etc/stagehand.toml` beside the plugin, each
# run appending a line (hook, job, node, uid, the job's --tmpdir and --stage-out values as slurmd
# hands them to the script) and the CLI's stderr to
# $DIR/log/job-scripts.log (slurmd logs a script's output only at debug2 when it exits 0).
#
# Everything lives under STAGEHAND_CLUSTER_DIR (default /tmp/stagehand-cluster) and uses ports
# STAGEHAND_CLUSTER_PORT .. +2 (default 46817), and +10 .. +99 for the steps' reserved ports, so it
# never collides with a site's cluster or with another test cluster given values 100 apart. STAGEHAND_SLURM_PREFIX picks the Slurm whose
# daemons and clients run (default empty: Debian's, in /usr); `env` puts its bin/ first in PATH,
# and the tests give that PATH to the test user too. munged is always the system's. Run as root.
set -euo pipefail

DIR=${STAGEHAND_CLUSTER_DIR:-/tmp/stagehand-cluster}
PORT=${STAGEHAND_CLUSTER_PORT:-46817}
TEST_USER=${STAGEHAND_TEST_USER:-stagehand-test}
SERVICE_USER=${STAGEHAND_SERVICE_USER:-stagehand}
NODES=(node1 node2)
HOST=$(hostname -s)
# namespace/tmpfs's BasePath (`cluster.sh namespace tmpfs`): Slurm refuses one under /tmp or
# /dev/shm, where this cluster's directory may be; one per cluster, by its ports.
NS_BASE=/run/stagehand-cluster-ns/$PORT

log() { echo "cluster: $*" >&2; }
die() { echo "cluster: error: $*" >&2; exit 1; }

# The Slurm to run: STAGEHAND_SLURM_PREFIX; for stop and env, when it is not set, the one the
# running cluster was started with (recorded in $DIR/etc/slurm-prefix).
use_slurm() {
  SLURM_PREFIX=${1%/}
  SLURM_BIN=${SLURM_PREFIX:-/usr}/bin
  SLURM_SBIN=${SLURM_PREFIX:-/usr}/sbin
}
use_slurm "${STAGEHAND_SLURM_PREFIX:-}"
if [ "${1:-}" != start ] && [ -z "${STAGEHAND_SLURM_PREFIX+set}" ] && [ -f "$DIR/etc/slurm-prefix" ]; then
  use_slurm "$(cat "$DIR/etc/slurm-prefix")"
fi
# And the test user it was started with (stop kills that user's processes and cancels its jobs).
if [ "${1:-}" != start ] && [ -z "${STAGEHAND_TEST_USER:-}" ] && [ -f "$DIR/etc/test-user" ]; then
  TEST_USER=$(cat "$DIR/etc/test-user")
fi

print_env() {
  echo "export SLURM_CONF=$DIR/etc/slurm.conf"
  echo "export STAGEHAND_CLUSTER_DIR=$DIR"
  echo "export STAGEHAND_TEST_USER=$TEST_USER"
  echo "export STAGEHAND_TEST_CONFIG=$DIR/etc/stagehand.toml"
  echo "export STAGEHAND_SCRATCH=$DIR/scratch"
  echo "export STAGEHAND_DAEMON_TOML=$DIR/etc/daemon.toml.part"
  echo "export STAGEHAND_SLURM_PREFIX=$SLURM_PREFIX"
  echo "export STAGEHAND_SLURM_BIN=$SLURM_BIN"
  echo "export PATH=$SLURM_BIN:\$PATH"
}

# The clients must be the daemons' release: an older sbatch against a newer slurmctld fails with
# "Insane message length".
check_slurm() {
  local f
  for f in "$SLURM_SBIN/slurmctld" "$SLURM_SBIN/slurmd" "$SLURM_BIN/sbatch" "$SLURM_BIN/sinfo"; do
    [ -x "$f" ] || die "no $f (STAGEHAND_SLURM_PREFIX=${SLURM_PREFIX:-(empty: /usr)})"
  done
  log "Slurm: $("$SLURM_SBIN/slurmctld" -V) from ${SLURM_PREFIX:-/usr}"
}

ensure_user() {
  if ! id "$TEST_USER" >/dev/null 2>&1; then
    useradd --create-home --shell /bin/bash "$TEST_USER"
  fi
  # stagehandd's unprivileged service user, which writes the cache (the packages make it with
  # sysusers.d).
  if ! id "$SERVICE_USER" >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin "$SERVICE_USER"
  fi
}

# The node names are what MASTER_ADDR holds: make them resolve to this host.
ensure_hosts() {
  local n
  for n in "${NODES[@]}"; do
    getent hosts "$n" >/dev/null || echo "127.0.0.1 $n # stagehand test cluster" >>/etc/hosts
  done
}

# The cluster's block of ports kept out of the kernel's ephemeral ports: the steps' reserved ports
# (MpiParams=ports=), as docs/admin-guide.md asks of a site (else any outgoing connection on the
# host may hold one, and --ddp-env's check that MASTER_PORT can be bound rightly fails the step),
# and the daemons' own, which a restarted slurmd or slurmctld must bind again while other clusters
# beside it make connections.
reserve_step_ports() {
  local f=/proc/sys/net/ipv4/ip_local_reserved_ports range="$PORT-$((PORT + 99))" cur
  cur=$(cat "$f" 2>/dev/null) || return 0
  case ",$cur," in *",$range,"*) return 0 ;; esac
  echo "${cur:+$cur,}$range" >"$f" 2>/dev/null || log "cannot reserve ports $range in $f: a step may find its port taken"
}

# plugstack.conf: a copy of a built plugin with the build tree's CLI, or an installed plugin in
# place with its own default CLI.
write_plugstack() {
  local plugin=$1 mode=$2
  if [ "$mode" = installed ]; then
    ln -sf "$(command -v stagehandd || echo /usr/sbin/stagehandd)" "$DIR/lib/stagehandd"
    echo "required $plugin config=$DIR/etc/stagehand.toml" >"$DIR/etc/plugstack.conf"
  else
    install -m 0755 "$plugin" "$DIR/lib/stagehand.so"
    install -m 0755 "$(dirname "$plugin")/../helper/stagehand" "$DIR/lib/stagehand"
    install -m 0755 "$(dirname "$plugin")/../helper/stagehandd" "$DIR/lib/stagehandd"
    echo "required $DIR/lib/stagehand.so config=$DIR/etc/stagehand.toml helper=$DIR/lib/stagehand" >"$DIR/etc/plugstack.conf"
  fi
  chmod 0644 "$DIR/etc/plugstack.conf"
}

# STAGEHAND_CLUSTER_PROLOG=1: the Prolog=/Epilog= wrappers (slurm.conf takes no arguments) and
# their slurm.conf lines; nothing otherwise.
write_job_scripts() {
  local mode=$1 cli=$DIR/lib/stagehand hook
  [ "${STAGEHAND_CLUSTER_PROLOG:-0}" = 1 ] || return 0
  [ "$mode" != installed ] || cli=$(command -v stagehand || echo /usr/bin/stagehand)
  for hook in prolog epilog; do
    cat >"$DIR/lib/$hook.sh" <<SH
#!/bin/sh
# slurm.conf ${hook^}= (written by tests/cluster/cluster.sh, STAGEHAND_CLUSTER_PROLOG=1)
echo "\$(date +%T.%N) $hook script: job=\$SLURM_JOB_ID node=\$SLURMD_NODENAME uid=\$SLURM_JOB_UID tmpdir=\${SPANK__SLURM_SPANK_OPTION_stagehand_tmpdir-unset} stage_out=\${SPANK_STAGEHAND_STAGE_OUT-unset} stage_data=\${SPANK_STAGEHAND_STAGE_DATA_ASKED-unset} context=\${SLURM_SCRIPT_CONTEXT-unset}" >>"$DIR/log/job-scripts.log"
exec "$cli" $hook --config "$DIR/etc/stagehand.toml" 2>>"$DIR/log/job-scripts.log"
SH
    chmod 0755 "$DIR/lib/$hook.sh"
    echo "${hook^}=$DIR/lib/$hook.sh"
  done
}

write_configs() {
  local plugin=$1 mode=$2
  mkdir -p "$DIR"/{etc,lib,log,ctld,munge,scratch,work,run,state,cache} "$DIR"/spool/{node1,node2}
  chmod 0755 "$DIR" "$DIR"/{etc,lib,log,scratch}
  chmod 0700 "$DIR/munge" "$DIR/ctld"
  chown "$TEST_USER": "$DIR/work"
  write_plugstack "$plugin" "$mode"

  # The daemon's part of the config, kept apart so tests that rewrite [tmpdir] keep it.
  cat >"$DIR/etc/daemon.toml.part" <<TOML
[daemon]
socket = "$DIR/run/%n.sock"
state_dir = "$DIR/state/%n"
cache_dir = "$DIR/cache/%n"
cache_max_bytes = "2G"
gc_interval = "3s"
user = "$SERVICE_USER"
metrics_file = "$DIR/log/metrics-%n.prom"
TOML
  cat >"$DIR/etc/stagehand.toml" <<TOML
# Test-cluster configuration (written by tests/cluster/cluster.sh).
[tmpdir]
base = "$DIR/scratch/%n"
default = false
keep_for = "1h"
$(cat "$DIR/etc/daemon.toml.part")
TOML
  chmod 0644 "$DIR/etc/stagehand.toml"

  # (No single quote in it: Slurm's python testsuite rewrites it with `echo '...'`.)
  cat >"$DIR/etc/slurm.conf" <<CONF
# Test cluster (written by tests/cluster/cluster.sh).
ClusterName=stagehandtest
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket,cred_expire=10
CredType=cred/munge
StateSaveLocation=$DIR/ctld
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/slurmctld.pid
# Job ids of their own too (tests find the slurmstepd of a job by "[JOBID."): 1, 100001, 200001, ...
FirstJobId=$(( PORT > 46817 ? (PORT - 46817) / 100 * 100000 + 1 : 1 ))
SlurmdPidFile=$DIR/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$DIR/etc/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
# Every step gets ports of its own (SLURM_STEP_RESV_PORTS): MASTER_PORT of --ddp-env then comes
# from them. A range per cluster (inside the block of 100 ports of this cluster), so that test
# clusters running side by side never hand out the same port.
MpiParams=ports=$((PORT + 10))-$((PORT + 99))
# salloc without a command starts its shell in an interactive step on the first node.
LaunchParameters=use_interactive_step
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
PrologFlags=Alloc
SlurmdParameters=config_overrides
ReturnToService=2
KillWait=3
MinJobAge=600
SlurmdTimeout=60
MessageTimeout=20
InactiveLimit=0
NodeName=node1 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((PORT + 1)) CPUs=4 RealMemory=2000 State=UNKNOWN
NodeName=node2 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((PORT + 2)) CPUs=4 RealMemory=2000 State=UNKNOWN
PartitionName=debug Nodes=node[1-2] Default=YES MaxTime=INFINITE State=UP
CONF
  write_job_scripts "$mode" >>"$DIR/etc/slurm.conf"
  chmod 0644 "$DIR/etc/slurm.conf"
  printf "IgnoreSystemd=yes\n" >"$DIR/etc/cgroup.conf"
}

start_munge() {
  dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
  chmod 0400 "$DIR/munge/munge.key"
  /usr/sbin/munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
    --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" \
    --seed-file="$DIR/munge/munged.seed"
  chmod 0755 "$DIR/munge"
}

start_controller() {
  "$SLURM_SBIN/slurmctld" -f "$SLURM_CONF" -i
}

start_node() {
  "$SLURM_SBIN/slurmd" -f "$SLURM_CONF" -N "$1"
}

daemon_start() {
  local n=$1 hide=${2:-} i started
  local -a wrap=()
  eval "$(print_env)"
  started=$(grep -c "listening on" "$DIR/log/stagehandd-$n.log" 2>/dev/null || true)
  if [ -n "$hide" ]; then
    # As a unit's sandbox would (PrivateTmp=, ProtectHome=): the daemon sees an empty tmpfs at
    # $hide, the jobs see what is there. unshare and sh exec: the pid stays the daemon's.
    wrap=(unshare --mount --propagation private sh -c 'mount -t tmpfs -o size=1m,mode=0755 hidden "$0" && exec "$@"' "$hide")
  fi
  # A node restarted "private" has a mount namespace of its own: its daemon runs in it too (it
  # must see the node's own tmpdir base, as on a real node).
  local slurmd_pid
  slurmd_pid=$(pid_of "$DIR/slurmd-$n.pid" slurmd)
  if [ -n "$slurmd_pid" ] && [ "$(readlink "/proc/$slurmd_pid/ns/mnt")" != "$(readlink /proc/self/ns/mnt)" ]; then
    wrap=(nsenter "--mount=/proc/$slurmd_pid/ns/mnt" "${wrap[@]}")
  fi
  # The daemon asks slurmctld (squeue) whether jobs still run: it gets this cluster's SLURM_CONF.
  SLURM_CONF="$SLURM_CONF" setsid "${wrap[@]}" "$DIR/lib/stagehandd" --config "$DIR/etc/stagehand.toml" --node "$n" \
    >>"$DIR/log/stagehandd-$n.log" 2>&1 </dev/null 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- &
  echo $! >"$DIR/stagehandd-$n.pid"
  for i in $(seq 1 100); do
    [ "$(grep -c "listening on" "$DIR/log/stagehandd-$n.log" 2>/dev/null || true)" -gt "${started:-0}" ] && return 0
    sleep 0.1
  done
  die "stagehandd for $n did not start (see $DIR/log/stagehandd-$n.log)"
}

# The private layout: [tmpdir] base = "$SCRATCH/local" (no %n) is a tmpfs of each node's own.
node_restart() {
  local n=$1 mode=${2:-} i
  eval "$(print_env)"
  kill_pidfile "$DIR/slurmd-$n.pid" slurmd
  if [ "$mode" = private ]; then
    mkdir -p "$DIR/scratch/local"
    # The namespace holds the mounts that exist now (sharedfs included) and its own tmpfs.
    unshare --mount --propagation private sh -c \
      "mount -t tmpfs -o size=1500m,mode=0755 stagehand-$n '$DIR/scratch/local' && exec '$SLURM_SBIN/slurmd' -f '$SLURM_CONF' -N '$n'"
  else
    start_node "$n"
  fi
  for i in $(seq 1 100); do
    [ -s "$DIR/slurmd-$n.pid" ] && kill -0 "$(cat "$DIR/slurmd-$n.pid")" 2>/dev/null && break
    sleep 0.1
  done
  wait_idle
}

daemon_stop() {
  local n=$1 sig=${2:-TERM} f pid
  f="$DIR/stagehandd-$n.pid"
  [ -f "$f" ] || return 0
  pid=$(pid_of "$f" stagehandd)
  if [ -n "$pid" ]; then
    kill -"$sig" "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    [ -z "$(pid_of "$f" stagehandd)" ] || kill -9 "$pid" 2>/dev/null || true # (still ours: pids are reused)
  fi
  rm -f "$f"
}

wait_idle() {
  local i state
  for i in $(seq 1 120); do
    state=$("$SLURM_BIN/sinfo" -h -N -o '%N %T' 2>/dev/null | sort | tr '\n' ' ' || true)
    if [ "$state" = "node1 idle node2 idle " ]; then
      log "both nodes idle after ~$((i / 2))s"
      return 0
    fi
    sleep 0.5
  done
  log "nodes did not become idle: $state"
  tail -n 20 "$DIR"/log/*.log >&2 || true
  return 1
}

# namespace_set tmpfs|none: see the usage at the top.
namespace_set() {
  local mode=$1 n version key
  eval "$(print_env)"
  sed -i '/^NamespaceType=/d; /^JobContainerType=/d; s/^PrologFlags=.*/PrologFlags=Alloc/' "$DIR/etc/slurm.conf"
  rm -f "$DIR/etc/job_container.conf"
  case "$mode" in
    none) ;;
    tmpfs)
      rm -rf "$DIR/private"
      mkdir -p "$DIR/private" "$NS_BASE"
      echo "$NS_BASE" >"$DIR/etc/ns-base"
      chmod 1777 "$DIR/private"
      chmod 0700 "$NS_BASE"
      version=$("$SLURM_SBIN/slurmd" -V | awk '{ split($2, v, "."); print v[1] * 100 + v[2] }')
      key=JobContainerType=job_container/tmpfs
      [ "$version" -lt 2511 ] || key=NamespaceType=namespace/tmpfs
      sed -i 's/^PrologFlags=.*/PrologFlags=Alloc,Contain/' "$DIR/etc/slurm.conf"
      echo "$key" >>"$DIR/etc/slurm.conf"
      # BasePath gets /NODENAME appended by a Slurm built with --enable-multiple-slurmd.
      printf 'AutoBasePath=true\nBasePath=%s\nDirs=%s\n' "$NS_BASE" "$DIR/private" >"$DIR/etc/job_container.conf"
      chmod 0644 "$DIR/etc/job_container.conf"
      ;;
    *) die "namespace: tmpfs or none, not '$mode'" ;;
  esac
  kill_pidfile "$DIR/slurmctld.pid" slurmctld
  for n in "${NODES[@]}"; do kill_pidfile "$DIR/slurmd-$n.pid" slurmd; done
  start_controller
  for n in "${NODES[@]}"; do start_node "$n"; done
  wait_idle
}

cmd_start() {
  local mode=copy
  if [ "${1:-}" = --installed ]; then
    mode=installed
    shift
  fi
  local plugin=${1:?usage: cluster.sh start [--installed] PLUGIN_SO}
  [ "$(id -u)" -eq 0 ] || die "run as root"
  [ -f "$plugin" ] || die "no plugin at $plugin (build first)"
  check_slurm
  if [ -f "$DIR/slurmctld.pid" ]; then
    log "stopping a previous cluster in $DIR"
    cmd_stop
  fi
  sweep # what a run killed outright left of a cluster here (its pid files may be gone)
  # Users, /etc/hosts and the reserved ports are the host's: one cluster at a time changes them
  # (CI starts several side by side).
  (
    flock 8
    ensure_user
    ensure_hosts
    reserve_step_ports
  ) 8>/run/lock/stagehand-test-cluster.lock
  # A fresh work directory: job ids start again at FirstJobId, and files a test left for job N of
  # an earlier cluster (release-N) must not speak to job N of this one.
  rm -rf "$DIR/work"
  # Nor job directories and trash an earlier cluster left in the scratch bases (one stopped while a
  # job ran): job N of this cluster is not that one, and the tests count what is left there.
  # A mount left there (a test's FUSE share, a node's tmpfs) is detached first: emptying it would
  # act on what it shows, and a dead FUSE mount would fail or hang the removal.
  local d m base
  base=$(realpath -m "$DIR/scratch")
  while read -r m; do
    m=$(printf '%b' "$m") # findmnt -r writes a space as \x20
    if [[ "$m" == "$base/"* ]]; then
      umount -l "$m" || ! mountpoint -q "$m" || die "cannot detach the mount $m"
    fi
  done < <(findmnt -rn -o TARGET | sort -r)
  for d in "$DIR"/scratch/*/; do
    d=${d%/}
    [ -d "$d" ] && [ ! -L "$d" ] || continue
    find "$d" -mindepth 1 -maxdepth 1 -exec rm -rf --one-file-system -- {} + \
      || die "cannot empty $d (a mount or an immutable file left there?)"
  done
  write_configs "$plugin" "$mode"
  echo "$SLURM_PREFIX" >"$DIR/etc/slurm-prefix"
  echo "$TEST_USER" >"$DIR/etc/test-user"
  eval "$(print_env)"
  start_munge
  start_controller
  local n
  for n in "${NODES[@]}"; do
    start_node "$n"
  done
  wait_idle || { cmd_stop; die "cluster did not start"; }
  for n in "${NODES[@]}"; do
    daemon_start "$n"
  done
}

# The pid in a pid file, when that process is still the program named (a pid file an earlier
# machine or boot left may name anybody now).
pid_of() {
  local f=$1 name=$2 pid
  pid=$(cat "$f" 2>/dev/null || true)
  [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$name" ] && echo "$pid"
  return 0
}

kill_pidfile() {
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(pid_of "$f" "$2")
  if [ -n "$pid" ]; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    [ -z "$(pid_of "$f" "$2")" ] || kill -9 "$pid" 2>/dev/null || true # (still ours: pids are reused)
  fi
  rm -f "$f"
}

cmd_stop() {
  eval "$(print_env)"
  if [ -f "$DIR/slurmctld.pid" ]; then
    "$SLURM_BIN/scancel" --full --quiet --user="$TEST_USER" 2>/dev/null || true
    for _ in $(seq 1 20); do
      [ -z "$("$SLURM_BIN/squeue" -h 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  for n in "${NODES[@]}"; do daemon_stop "$n"; kill_pidfile "$DIR/slurmd-$n.pid" slurmd; done
  # Steps left behind, and daemons of this cluster that another started (Slurm's own testsuite
  # starts `slurmd -N node3` ...): only ours, recognised by the SLURM_CONF in their environment.
  local pid
  for pid in $(pgrep -f '^slurmstepd:' || true) $(pgrep -x slurmd || true) $(pgrep -x slurmctld || true); do
    if grep -qxz "SLURM_CONF=$DIR/etc/slurm.conf" "/proc/$pid/environ" 2>/dev/null; then
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  pkill -9 -u "$TEST_USER" 2>/dev/null || true # tasks orphaned by killed steps (our own test user)
  kill_pidfile "$DIR/slurmctld.pid" slurmctld
  kill_pidfile "$DIR/munge/munged.pid" munged
  sweep
  rm -rf "$DIR/ctld" "$DIR/spool" "$DIR/munge" "$DIR/log" "$DIR/run" "$DIR/state" "$DIR/cache" "$DIR/etc/slurm-prefix" "$DIR/etc/test-user"
}

# What a test started and a stopped run (Ctrl-C, a killed CI lane) never took down: processes that
# name this cluster's directory on their command line (the shared-filesystem stand-ins, a test's
# hung FUSE server, a job's leftovers) and mounts below it (FUSE, tmpfs, bind mounts).
sweep() {
  local p pid cmd m base
  base=$(realpath -m "$DIR")
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [ "$pid" != $$ ] && [ "$pid" != "$PPID" ] || continue
    cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue # (gone meanwhile: skipped)
    if [[ "$cmd" == *"$DIR/"* || "$cmd" == *"$base/"* ]]; then kill -9 "$pid" 2>/dev/null || true; fi
  done
  # And namespace/tmpfs's BasePath, where `cluster.sh namespace tmpfs` put it (the jobs' mounts).
  local ns
  ns=$(cat "$DIR/etc/ns-base" 2>/dev/null || true)
  while read -r m; do
    m=$(printf '%b' "$m") # findmnt -r writes a space as \x20
    if [[ "$m" == "$base/"* || ( -n "$ns" && "$m" == "$ns/"* ) ]]; then umount -l "$m" 2>/dev/null || true; fi
  done < <(findmnt -rn -o TARGET | sort -r)
  if [ -n "$ns" ]; then
    rm -rf --one-file-system "$ns"
    rm -f "$DIR/etc/ns-base"
  fi
}

case "${1:-}" in
  start) shift; cmd_start "$@" ;;
  stop) cmd_stop ;;
  env) print_env ;;
  daemon-start) daemon_start "${2:?node}" "${3:-}" ;;
  daemon-stop) daemon_stop "${2:?node}" "${3:-TERM}" ;;
  # (for tests that stop one: the same way the cluster started it, never holding bats's pipes)
  node-start) eval "$(print_env)"; start_node "${2:?node}" </dev/null >/dev/null 2>&1 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- ;;
  controller-start) eval "$(print_env)"; start_controller </dev/null >/dev/null 2>&1 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- ;;
  node-restart) node_restart "${2:?node}" "${3:-}" ;;
  namespace) namespace_set "${2:?tmpfs or none}" </dev/null >/dev/null 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- ;;
  sweep) sweep ;; # (also for test.sh: its whole tmpfs, unit tests' leftovers included)
  *) echo "usage: cluster.sh start [--installed] PLUGIN_SO | stop | env | daemon-start NODE | daemon-stop NODE [SIGNAL] | node-start NODE | controller-start | node-restart NODE [private] | namespace tmpfs|none | sweep" >&2; exit 2 ;;
esac
