#!/usr/bin/env bash
# The first process of the guest that scripts/ci/package-systemd.sh boots: run by
#   unshare --pid --mount --uts --ipc --net --cgroup --fork ... guest-init.sh WORK HOSTNAME
# as PID 1 of fresh PID, mount, UTS, IPC, network and cgroup namespaces (its cgroup namespace root
# is a cgroup2 directory the phase made for the guest). It builds the guest's root and replaces
# itself with Debian's systemd (/lib/systemd/systemd) as the guest's PID 1:
#   /            overlayfs: the host's root filesystem read-only below, a tmpfs above (WORK/t, only
#                mounted in this mount namespace): whatever the guest writes, deletes or installs
#                stays in memory and goes with the namespace; the host's files are never written
#   /proc        a fresh proc of the new PID namespace; /proc/sys read-only (so that systemd and
#                its units cannot change the host's kernel settings)
#   /sys         a fresh sysfs, read-only; /sys/fs/cgroup a cgroup2 mount of the guest's cgroup
#                (systemd runs in unified mode and delegates below it)
#   /dev         a tmpfs with null, zero, full, random, urandom, tty, its own devpts and shm;
#                /dev/console is WORK/console.log (what units write to the console; systemd
#                itself logs to the guest's journal)
#   /run, /tmp   fresh tmpfs (/var/tmp is the overlay's)
# It also names the host (UTS namespace), masks the units that cannot work in a container or would
# reach outside it (getty, time sync, kernel modules and sysctls, network configuration, the
# host's own services such as a database, timers), makes multi-user.target the default, reserves
# the guest's Slurm ports in its own network namespace and copies WORK/payload (the .deb and the
# tests) to /srv/stagehand-systemd in the guest.
set -euo pipefail
W=${1:?usage: guest-init.sh WORK HOSTNAME}
NAME=${2:?usage: guest-init.sh WORK HOSTNAME}
[ "$$" -eq 1 ] || { echo "guest-init: not PID 1 of a new PID namespace" >&2; exit 1; }

mount -t tmpfs -o size=6g,mode=0700 stagehand-guest "$W/t"
mkdir -p "$W/t/upper" "$W/t/work" "$W/t/root"
mount -t overlay stagehand-guest -o "lowerdir=/,upperdir=$W/t/upper,workdir=$W/t/work" "$W/t/root"
R=$W/t/root

# The guest's network namespace has only its loopback; its Slurm ports (slurmctld 48817, slurmd
# 48818, the steps' 48830-48899) are kept out of its ephemeral ports, as docs/admin-guide.md asks
# of a site. (/proc/sys/net is this namespace's, not the host's.)
echo 48817-48916 >/proc/sys/net/ipv4/ip_local_reserved_ports
# And an IPv4 address besides 127.0.0.1: Slurm resolves even "127.0.0.1" with AF_INET and
# AI_ADDRCONFIG, which glibc answers only where some address other than 127.0.0.1 is configured
# ("Name or service not known" otherwise). systemd brings lo up.
ip addr add 10.254.0.1/32 dev lo

mount -t proc -o nosuid,nodev,noexec proc "$R/proc"
for p in sys sysrq-trigger; do
  [ -e "$R/proc/$p" ] || continue
  mount --bind "$R/proc/$p" "$R/proc/$p"
  mount -o remount,bind,ro "$R/proc/$p"
done
mount -t sysfs -o ro,nosuid,nodev,noexec sysfs "$R/sys"
mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 "$R/sys/fs/cgroup"

mount -t tmpfs -o mode=0755,nosuid,size=64m dev "$R/dev"
for d in null:1:3 zero:1:5 full:1:7 random:1:8 urandom:1:9 tty:5:0; do
  IFS=: read -r n major minor <<<"$d"
  mknod -m 0666 "$R/dev/$n" c "$major" "$minor"
done
mkdir -p "$R/dev/pts" "$R/dev/shm"
mount -t devpts -o newinstance,ptmxmode=0666,mode=0620,gid=5 devpts "$R/dev/pts"
ln -s pts/ptmx "$R/dev/ptmx"
mount -t tmpfs -o mode=1777,nosuid,nodev shm "$R/dev/shm"
ln -s /proc/self/fd "$R/dev/fd"
ln -s /proc/self/fd/0 "$R/dev/stdin"
ln -s /proc/self/fd/1 "$R/dev/stdout"
ln -s /proc/self/fd/2 "$R/dev/stderr"
touch "$R/dev/console"
mount --bind "$W/console.log" "$R/dev/console"
mount -t tmpfs -o mode=0755,nosuid,nodev run "$R/run"
mount -t tmpfs -o mode=1777,nosuid,nodev tmp "$R/tmp"

hostname "$NAME"
echo "$NAME" >"$R/etc/hostname"
echo "127.0.0.1 $NAME # stagehand systemd guest" >>"$R/etc/hosts"

S=$R/etc/systemd/system
ln -sfn /lib/systemd/system/multi-user.target "$S/default.target"
for u in getty.target getty@tty1.service console-getty.service serial-getty@.service \
  systemd-timesyncd.service systemd-networkd.service systemd-networkd.socket \
  systemd-networkd-wait-online.service systemd-network-generator.service systemd-resolved.service \
  NetworkManager.service networking.service ssh.service cron.service postgresql.service \
  e2scrub_reap.service e2scrub_all.timer apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer \
  fstrim.timer man-db.timer logrotate.timer systemd-tmpfiles-clean.timer \
  systemd-pstore.service systemd-modules-load.service kmod-static-nodes.service systemd-sysctl.service \
  systemd-binfmt.service proc-sys-fs-binfmt_misc.automount sys-kernel-config.mount \
  sys-kernel-debug.mount sys-kernel-tracing.mount sys-fs-fuse-connections.mount dev-hugepages.mount \
  systemd-random-seed.service systemd-firstboot.service systemd-repart.service \
  systemd-pcrphase.service systemd-pcrphase-sysinit.service systemd-udevd.service \
  systemd-udev-trigger.service systemd-udev-settle.service; do
  ln -sfn /dev/null "$S/$u"
done

# A container image's policy-rc.d (exit 101: "do not start services") would keep the maintainer
# scripts from starting and stopping units as they do on a real node.
rm -f "$R/usr/sbin/policy-rc.d"

mkdir -p "$R/srv/stagehand-systemd"
cp -a "$W/payload/." "$R/srv/stagehand-systemd/"

mkdir "$R/.oldroot"
cd "$R"
pivot_root . .oldroot
umount -l /.oldroot
rmdir /.oldroot
cd /
exec env -i container=stagehand-ci PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 /lib/systemd/systemd
