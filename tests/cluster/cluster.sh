#!/usr/bin/env bash
# A real local Slurm cluster for the tests: a private munged, slurmctld and two slurmd
# (node1, node2) on localhost, with the built stagehand.so in plugstack.conf.
#
#   cluster.sh start PLUGIN_SO   start everything, wait until both nodes are idle (the CLI, for
#                                --stage-data, is taken from PLUGIN_SO's build tree: ../helper)
#   cluster.sh stop              stop everything this cluster started, remove its state
#   cluster.sh env               print the variables a client needs (eval "$(cluster.sh env)")
#
# Everything lives under STAGEHAND_CLUSTER_DIR (default /tmp/stagehand-cluster) and uses ports
# STAGEHAND_CLUSTER_PORT .. +2 (default 46817), so it never collides with a site's cluster or
# with another test cluster given other values. Run as root.
set -euo pipefail

DIR=${STAGEHAND_CLUSTER_DIR:-/tmp/stagehand-cluster}
PORT=${STAGEHAND_CLUSTER_PORT:-46817}
TEST_USER=${STAGEHAND_TEST_USER:-stagehand-test}
NODES=(node1 node2)
HOST=$(hostname -s)

log() { echo "cluster: $*" >&2; }
die() { echo "cluster: error: $*" >&2; exit 1; }

print_env() {
  echo "export SLURM_CONF=$DIR/etc/slurm.conf"
  echo "export STAGEHAND_CLUSTER_DIR=$DIR"
  echo "export STAGEHAND_TEST_USER=$TEST_USER"
  echo "export STAGEHAND_TEST_CONFIG=$DIR/etc/stagehand.toml"
  echo "export STAGEHAND_SCRATCH=$DIR/scratch"
}

ensure_user() {
  if ! id "$TEST_USER" >/dev/null 2>&1; then
    useradd --create-home --shell /bin/bash "$TEST_USER"
  fi
}

# The node names are what MASTER_ADDR holds: make them resolve to this host.
ensure_hosts() {
  local n
  for n in "${NODES[@]}"; do
    getent hosts "$n" >/dev/null || echo "127.0.0.1 $n # stagehand test cluster" >>/etc/hosts
  done
}

write_configs() {
  local plugin=$1
  mkdir -p "$DIR"/{etc,lib,log,ctld,munge,scratch,work} "$DIR"/spool/{node1,node2}
  chmod 0755 "$DIR" "$DIR"/{etc,lib,log,scratch}
  chmod 0700 "$DIR/munge" "$DIR/ctld"
  install -m 0755 "$plugin" "$DIR/lib/stagehand.so"
  install -m 0755 "$(dirname "$plugin")/../helper/stagehand" "$DIR/lib/stagehand"
  chown "$TEST_USER": "$DIR/work"

  cat >"$DIR/etc/stagehand.toml" <<TOML
# Test-cluster configuration (written by tests/cluster/cluster.sh).
[tmpdir]
base = "$DIR/scratch/%n"
default = false
keep_for = "1h"
TOML
  chmod 0644 "$DIR/etc/stagehand.toml"

  echo "required $DIR/lib/stagehand.so config=$DIR/etc/stagehand.toml helper=$DIR/lib/stagehand" >"$DIR/etc/plugstack.conf"
  chmod 0644 "$DIR/etc/plugstack.conf"

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
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
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
  chmod 0644 "$DIR/etc/slurm.conf"
}

start_munge() {
  dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
  chmod 0400 "$DIR/munge/munge.key"
  munged --force --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
    --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/log/munged.log" \
    --seed-file="$DIR/munge/munged.seed"
  chmod 0755 "$DIR/munge"
}

wait_idle() {
  local i state
  for i in $(seq 1 120); do
    state=$(sinfo -h -N -o '%N %T' 2>/dev/null | sort | tr '\n' ' ' || true)
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

cmd_start() {
  local plugin=${1:?usage: cluster.sh start PLUGIN_SO}
  [ "$(id -u)" -eq 0 ] || die "run as root"
  [ -f "$plugin" ] || die "no plugin at $plugin (build first)"
  if [ -f "$DIR/slurmctld.pid" ]; then
    log "stopping a previous cluster in $DIR"
    cmd_stop
  fi
  ensure_user
  ensure_hosts
  write_configs "$plugin"
  eval "$(print_env)"
  start_munge
  slurmctld -f "$SLURM_CONF" -i
  for n in "${NODES[@]}"; do
    slurmd -f "$SLURM_CONF" -N "$n"
  done
  wait_idle || { cmd_stop; die "cluster did not start"; }
}

kill_pidfile() {
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f" 2>/dev/null || true)
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

cmd_stop() {
  eval "$(print_env)"
  if [ -f "$DIR/slurmctld.pid" ]; then
    scancel --full --quiet --user="$TEST_USER" 2>/dev/null || true
    for _ in $(seq 1 20); do
      [ -z "$(squeue -h 2>/dev/null)" ] && break
      sleep 0.5
    done
  fi
  for n in "${NODES[@]}"; do kill_pidfile "$DIR/slurmd-$n.pid"; done
  # Steps left behind: only ours, recognised by the SLURM_CONF they inherited from our slurmd.
  local pid
  for pid in $(pgrep -f '^slurmstepd:' || true); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "SLURM_CONF=$DIR/etc/slurm.conf"; then
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  pkill -9 -u "$TEST_USER" 2>/dev/null || true # tasks orphaned by killed steps (our own test user)
  kill_pidfile "$DIR/slurmctld.pid"
  kill_pidfile "$DIR/munge/munged.pid"
  rm -rf "$DIR/ctld" "$DIR/spool" "$DIR/munge" "$DIR/log"
}

case "${1:-}" in
  start) shift; cmd_start "$@" ;;
  stop) cmd_stop ;;
  env) print_env ;;
  *) echo "usage: cluster.sh start PLUGIN_SO | stop | env" >&2; exit 2 ;;
esac
