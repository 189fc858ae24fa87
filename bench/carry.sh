#!/usr/bin/env bash
# For a many-core host without Slurm (the lent GPU machines: Ubuntu, no Slurm, no network): packs
# Debian 12's Slurm 22.05 and munge packages as installed here, this build's plugin, CLI, daemon
# and stage_tool, and the libraries they load, into DIR (inside the source tree, so that it travels
# with it). On the host, `bash bench/carry.sh --run DIR [ROUNDS]` (root) unpacks them, starts the
# test cluster as CI does and runs stage_e2e.sh without the daemon (ROUNDS, default 10), then
# daemon.sh (the daemon's miss in layouts a and b and its crowds of 4 and 16, issue 25 items 2 and
# 3, which two cores cannot show; STAGEHAND_CARRY_DAEMON_ROUNDS, default 3).
#   bench/carry.sh BUILD_DIR DIR          pack (here, as root, with the packages installed)
#   bench/carry.sh --run DIR [ROUNDS]     unpack and measure (there)
#   STAGEHAND_CARRY_BENCHES="e2e daemon"  which of the two run (the default: both, in that order)
# The host keeps its own libraries: the carried ones are given to ldconfig after them, so only
# those it lacks are used. A host without systemd gets a cgroup.conf with IgnoreSystemd=yes (in its
# copy of tests/cluster/cluster.sh) and /sys/fs/cgroup/system.slice.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)

pack() {
  local build=$1 out=$2 root f l
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  root=$(mktemp -d)
  trap 'rm -rf "$root"' RETURN
  for p in libmunge2 libslurm38 munge slurm-client slurm-wlm-basic-plugins slurmctld slurmd; do dpkg -L "$p"; done | sort -u |
    while read -r f; do
      case $f in /usr/share/* | /usr/include/* | /etc/* | /lib/systemd/*) continue ;; esac
      if [ -L "$f" ] || [ -f "$f" ]; then mkdir -p "$root$(dirname "$f")" && cp -a "$f" "$root$f"; fi
    done
  rm -f "$root/lib" # Debian's merged /usr symlink: never over the host's
  for d in slurmd slurmctld slurmstepd; do ln -sf "$d-wlm" "$root/usr/sbin/$d"; done # Debian's alternatives
  rm -rf "$out/b" && mkdir -p "$out/b/plugin" "$out/b/helper" "$out/b/bench" "$out/libs"
  cp "$build/plugin/stagehand.so" "$out/b/plugin/" && strip --strip-debug "$out/b/plugin/stagehand.so"
  cp "$build/helper/stagehand" "$build/helper/stagehandd" "$out/b/helper/" && strip --strip-unneeded "$out/b/helper/"*
  cp "$build/bench/stage_tool" "$out/b/bench/" && strip --strip-unneeded "$out/b/bench/stage_tool"
  { find "$root" -type f; find "$out/b" -type f; } | while read -r f; do
    [[ $(file -b "$f") == ELF* ]] || continue
    ldd "$f" 2>/dev/null | awk '/=> \//{ print $3 }'
  done | sort -u | grep -vE '/(libc|libm|libresolv|libpthread|libdl|librt|ld-linux-x86-64|libslurmfull|libslurm|libmunge)\.so' |
    while read -r l; do cp -L "$l" "$out/libs/"; done
  tar -C "$root" -czf "$out/slurm-root.tgz" .
  tar -C "$out/libs" -czf "$out/libs.tgz" . && rm -rf "$out/libs"
  du -sh "$out"
}

run() {
  local dir rounds=${2:-10}
  dir=$(cd "$1" && pwd)
  cd "$src"
  echo "== $(id -un), $(nproc) cores, $(. /etc/os-release && echo "$PRETTY_NAME")"
  tar -C / --skip-old-files -xzf "$dir/slurm-root.tgz"
  mkdir -p /opt/stagehand-carried && tar -C /opt/stagehand-carried -xzf "$dir/libs.tgz"
  echo /opt/stagehand-carried >/etc/ld.so.conf.d/zz-stagehand-carried.conf && ldconfig
  if [ ! -S /run/dbus/system_bus_socket ]; then
    grep -q 'cgroup.conf' tests/cluster/cluster.sh ||
      sed -i 's|^  chmod 0644 "\$DIR/etc/slurm.conf"$|&\n  printf "IgnoreSystemd=yes\\n" >"$DIR/etc/cgroup.conf"|' tests/cluster/cluster.sh
    mkdir -p /sys/fs/cgroup/system.slice
    echo "+cpuset +cpu +memory +pids" >/sys/fs/cgroup/system.slice/cgroup.subtree_control 2>/dev/null || true
  fi
  local b
  for b in ${STAGEHAND_CARRY_BENCHES:-e2e daemon}; do
    case $b in
      e2e) STAGEHAND_BENCH_PHASES=no-daemon bash bench/stage_e2e.sh "$dir/b" "$rounds" ;;
      daemon) bash bench/daemon.sh "$dir/b" "${STAGEHAND_CARRY_DAEMON_ROUNDS:-3}" ;;
      *) echo "carry.sh: unknown bench $b (e2e, daemon)" >&2; return 2 ;;
    esac
  done
}

case ${1:-} in
  --run) run "${2:?usage: carry.sh --run DIR [ROUNDS]}" "${3:-}" ;;
  -*|"") echo "usage: carry.sh BUILD_DIR DIR | carry.sh --run DIR [ROUNDS]" >&2; exit 2 ;;
  *) pack "$1" "${2:?usage: carry.sh BUILD_DIR DIR}" ;;
esac
