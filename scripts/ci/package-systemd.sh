#!/usr/bin/env bash
# CI phase: the .deb as an admin runs it, under real systemd. Boots Debian's systemd as PID 1 of a
# guest (new PID, mount, UTS, IPC, network and cgroup namespaces; root = an overlayfs of this
# machine's root with a tmpfs on top: tests/package/systemd/guest-init.sh), and runs
# tests/package/systemd/admin.bats inside it, in a systemd unit of the guest: apt-get install the
# .deb, a one-node Slurm from Debian's own units (munge, slurmctld, slurmd) with the plugin enabled
# by the package's plugstack drop-in, `systemctl enable --now stagehandd`, jobs of an ordinary user
# (--tmpdir, --stage-data miss then cache hit, --ddp-env, --stage-out into $HOME and /tmp, one
# cancelled), `systemctl reload` and `restart` of the daemon, its journal, `systemd-analyze
# security`, and `apt-get purge`. Nothing the guest does reaches this machine's files, processes
# or network; everything goes when the phase ends, however it ends (the guest's PID 1 is killed:
# its namespaces and mounts go with it; the cgroup and the work directory are removed).
#   package-systemd.sh BUILD_DIR    (the .deb from package-deb.sh; root; Debian 12's slurmctld,
#                                    slurmd, munge and systemd installed on this machine)
# STAGEHAND_SYSTEMD_KEEP=1 leaves the guest's work directory (console log, test output) behind;
# STAGEHAND_SYSTEMD_HOLD=1 keeps the guest up after the tests, for a look inside with the nsenter
# command it prints, until the script gets Ctrl-C or SIGTERM.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=$(cd "${1:?usage: package-systemd.sh BUILD_DIR}" && pwd)
deb=$(ls "$build"/stagehand_*.deb 2>/dev/null) || ci_die "no stagehand_*.deb in $build (run package-deb.sh first)"
[ "$(echo "$deb" | wc -l)" -eq 1 ] || ci_die "expected one .deb in $build, got: $deb"
[ "$(id -u)" -eq 0 ] || ci_die "run as root"
for t in unshare nsenter setpriv pivot_root bats; do command -v "$t" >/dev/null || ci_die "no $t"; done
[ -x /lib/systemd/systemd ] || ci_die "no /lib/systemd/systemd (Debian's systemd package)"
grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || ci_die "no overlayfs in this kernel"
# The guest's cgroup: a directory of the cgroup2 hierarchy (on a hybrid host /sys/fs/cgroup/unified,
# else /sys/fs/cgroup) that becomes the root of its cgroup namespace.
cg2=$(findmnt -n -t cgroup2 -o TARGET | head -n 1)
[ -n "$cg2" ] || ci_die "no cgroup2 hierarchy mounted (systemd 252 in the guest needs one)"

GUEST_NAME=shguest
START=$SECONDS
# What a run killed with SIGKILL left (its guest went with it: see setpriv below): the cgroup
# directories and work directory of runs whose process is gone.
for d in "$cg2"/stagehand-systemd.* "${TMPDIR:-/tmp}"/stagehand-systemd.*.*; do
  [ -d "$d" ] || continue
  pid=${d#*/stagehand-systemd.}
  pid=${pid%%.*}
  [[ "$pid" =~ ^[0-9]+$ ]] || continue
  ! kill -0 "$pid" 2>/dev/null || continue
  ci_log "removing $d, left by an earlier run (process $pid) that was killed"
  if [[ "$d" == "$cg2"/* ]]; then find "$d" -depth -type d -exec rmdir {} + 2>/dev/null || true; else rm -rf "$d"; fi
done
W=$(mktemp -d "${TMPDIR:-/tmp}/stagehand-systemd.$$.XXXXXX")
CG=$cg2/stagehand-systemd.$$
LAUNCHER='' GUEST_PID='' TESTS_PID=''
mkdir -p "$W/t" "$W/payload"
: >"$W/console.log"

# The way out, whatever the way: the guest's PID 1 killed (the kernel then kills every process of
# its PID namespace, and its mount namespace, overlay and tmpfs included, goes with the last of
# them), its cgroup directories removed (once empty), the work directory removed.
teardown() {
  local status=$?
  trap - EXIT INT TERM
  set +e
  [ -z "$TESTS_PID" ] || kill -TERM "$TESTS_PID" 2>/dev/null
  if [ -z "$GUEST_PID" ] && [ -n "$LAUNCHER" ]; then
    GUEST_PID=$(awk '{print $1}' "/proc/$LAUNCHER/task/$LAUNCHER/children" 2>/dev/null)
  fi
  [ -z "$GUEST_PID" ] || kill -KILL "$GUEST_PID" 2>/dev/null
  [ -z "$LAUNCHER" ] || kill -KILL "$LAUNCHER" 2>/dev/null
  [ -z "$LAUNCHER" ] || wait "$LAUNCHER" 2>/dev/null
  [ -z "$TESTS_PID" ] || wait "$TESTS_PID" 2>/dev/null
  local left=''
  # Until the guest's PID 1 is gone (it ends once the kernel has killed every process of its
  # namespace), a zombie waiting for its reaper counted as gone.
  for _ in $(seq 1 200); do
    if [ -z "$GUEST_PID" ] || [ ! -e "/proc/$GUEST_PID" ]; then break; fi
    [ "$(awk '/^State:/ {print $2}' "/proc/$GUEST_PID/status" 2>/dev/null)" != Z ] || break
    sleep 0.1
  done
  [ -z "$GUEST_PID" ] || [ ! -e "/proc/$GUEST_PID" ] ||
    [ "$(awk '/^State:/ {print $2}' "/proc/$GUEST_PID/status" 2>/dev/null)" = Z ] || left="$left the guest's PID 1 ($GUEST_PID)"
  for _ in $(seq 1 100); do
    [ -d "$CG" ] || break
    find "$CG" -depth -type d -exec rmdir {} + 2>/dev/null
    sleep 0.1
  done
  [ ! -d "$CG" ] || left="$left cgroup $CG"
  if grep -qs "$W/t" /proc/[0-9]*/mountinfo; then left="$left mounts under $W/t"; fi
  if [ "${STAGEHAND_SYSTEMD_KEEP:-0}" = 1 ]; then
    echo "package-systemd: kept $W" >&2
  else
    rm -rf "$W" || left="$left $W"
  fi
  [ -z "$left" ] || echo "package-systemd: left behind:$left" >&2
  exit "$status"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# guest COMMAND...: runs COMMAND in the guest (its namespaces and root), with a clean environment.
guest() {
  nsenter --target "$GUEST_PID" --mount --uts --ipc --net --pid --cgroup --root --wd -- \
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/root "$@"
}

# ---- boot -----------------------------------------------------------------------------------
cp "$deb" "$W/payload/"
cp "$CI_ROOT"/tests/package/systemd/*.bats "$CI_ROOT"/tests/package/systemd/*.bash "$W/payload/"
mkdir "$CG"
ci_log "booting $(/lib/systemd/systemd --version | head -n 1) as PID 1 of a guest (cgroup $CG, work $W)"
# setpriv: the launcher dies with this script (kill -9 included), and unshare --kill-child takes
# the guest's PID 1 with it; the guest gets no capability to load kernel modules, set the clock,
# read the kernel log or reach raw I/O.
(
  echo "$BASHPID" >"$CG/cgroup.procs"
  exec setpriv --pdeathsig KILL \
    --bounding-set -sys_module,-sys_time,-sys_rawio,-syslog,-wake_alarm,-mac_admin,-mac_override,-audit_control \
    unshare --pid --mount --uts --ipc --net --cgroup --fork --propagation private --kill-child=KILL \
    "$CI_ROOT/tests/package/systemd/guest-init.sh" "$W" "$GUEST_NAME"
) </dev/null >"$W/launcher.log" 2>&1 &
LAUNCHER=$!
for _ in $(seq 1 100); do
  GUEST_PID=$(awk '{print $1}' "/proc/$LAUNCHER/task/$LAUNCHER/children" 2>/dev/null)
  [ -z "$GUEST_PID" ] || break
  kill -0 "$LAUNCHER" 2>/dev/null || break
  sleep 0.05
done
[ -n "$GUEST_PID" ] || { cat "$W/launcher.log"; ci_die "the guest did not start"; }
# The launcher itself back to the host's root cgroup: the guest's root cgroup holds its PID 1 only.
echo "$LAUNCHER" >"$cg2/cgroup.procs" 2>/dev/null || true

# Usable once systemd answers on its private socket and the boot is over (is-system-running --wait).
state='' boot_end=$((SECONDS + 120))
while [ "$SECONDS" -lt "$boot_end" ]; do
  kill -0 "$GUEST_PID" 2>/dev/null || { cat "$W/launcher.log"; tail -n 40 "$W/console.log"; ci_die "the guest's PID 1 exited during boot"; }
  if [ -S "/proc/$GUEST_PID/root/run/systemd/private" ]; then
    state=$(guest timeout $((boot_end - SECONDS + 1)) systemctl is-system-running --wait 2>&1) || true
    case "$state" in running | degraded | maintenance | stopping | offline) break ;; esac
  fi
  sleep 0.1
done
boot_s=$((SECONDS - START))
ci_log "guest $GUEST_NAME (host PID $GUEST_PID): $state after ${boot_s}s"
if [ "$state" != running ]; then
  guest systemctl --failed --no-pager || true
  guest journalctl -b --no-pager -p warning | tail -n 40 || true
  [ "$state" = degraded ] || ci_die "the guest's systemd did not come up: '$state'"
fi

# ---- the tests, as a unit of the guest --------------------------------------------------------
ci_log "tests/package/systemd/admin.bats in the guest"
tap=$W/admin.tap
# (in the background and waited for, so that a signal to this script is handled at once)
{
  rc=0
  guest systemd-run --quiet --wait --pipe --collect --unit=stagehand-systemd-tests \
    --setenv=HOME=/root --setenv=TERM=dumb --setenv=STAGEHAND_GUEST_DEB="/srv/stagehand-systemd/$(basename "$deb")" \
    -- timeout 600 bats --tap /srv/stagehand-systemd/admin.bats </dev/null 2>&1 || rc=$?
  echo "$rc" >"$W/tests.rc"
} | tee "$tap" &
TESTS_PID=$!
wait "$TESTS_PID" || true
TESTS_PID=
status=$(cat "$W/tests.rc" 2>/dev/null || echo 1)

if [ "${STAGEHAND_SYSTEMD_HOLD:-0}" = 1 ]; then
  ci_log "guest held; enter it with: nsenter --target $GUEST_PID --mount --uts --ipc --net --pid --cgroup --root --wd bash"
  ci_log "end it with Ctrl-C or: kill -TERM $$"
  sleep infinity &
  wait $! || true
fi

passed=$(grep -c '^ok ' "$tap" || true)
failed=$(grep -c '^not ok ' "$tap" || true)
planned=$(sed -n 's/^1\.\.\([0-9]*\)$/\1/p' "$tap" | head -n 1)
exposure=$(cat "/proc/$GUEST_PID/root/srv/stagehand-systemd/exposure" 2>/dev/null || echo "not measured")
took=$((SECONDS - START))

echo
echo "================ package-systemd summary ================"
echo "guest:    Debian's systemd as PID 1 ($state after ${boot_s}s), overlay root, one-node Slurm from Debian's units"
echo "checks:   $passed passed, $failed failed, of ${planned:-?}"
grep -E '^(ok|not ok) ' "$tap" | sed 's/^/  /'
echo "systemd-analyze security stagehandd (in the guest): $exposure"
echo "time:     $(ci_mmss "$took")"
echo "========================================================="
ci_failed_tests "$tap"
[ -n "$planned" ] || ci_die "bats did not run in the guest (exit $status)"
if [ "$failed" -ne 0 ] || [ "$status" -ne 0 ] || [ "$passed" -ne "$planned" ]; then
  ci_die "$failed of $planned checks failed in the systemd guest (exit $status)"
fi
ci_result "package systemd: $passed of $planned admin checks under systemd passed, systemd-analyze security $exposure, in $(ci_mmss "$took")"
