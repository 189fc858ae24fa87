#!/usr/bin/env bash
# CI phase: install the .deb on this machine, run a two-node job with --tmpdir --stage-data
# --ddp-env through the INSTALLED plugin and CLI (plugstack names the installed stagehand.so and
# no helper=, so the plugin runs the CLI it was packaged with), check the installed unit with
# systemd-analyze verify, then purge and check that nothing of the package is left.
#   package-install.sh BUILD_DIR   (the .deb from package-deb.sh; Debian's Slurm runs the cluster)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
build=$(cd "${1:?usage: package-install.sh BUILD_DIR}" && pwd)
deb=$(ls "$build"/stagehand_*.deb)
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
plugin=/usr/lib/$arch/slurm-wlm/stagehand.so
export DEBIAN_FRONTEND=noninteractive
apt_log=$(mktemp)
trap 'rm -f "$apt_log"' EXIT
apt_get() {
  apt-get -o DPkg::Lock::Timeout=600 -y -q "$@" >"$apt_log" 2>&1 || { cat "$apt_log"; ci_die "apt-get $* failed"; }
  ci_log "apt-get $*: ok"
}

if [ "$(dpkg-query -W -f='${Status}' stagehand 2>/dev/null)" = "install ok installed" ]; then
  ci_log "purging a stagehand package left installed by an earlier run"
  apt_get purge stagehand
fi
apt_get install "$deb"
apt_get install --reinstall "$deb" # the upgrade path of the maintainer scripts
files=$(dpkg -L stagehand)
getent passwd stagehand >/dev/null || ci_die "postinst did not create the stagehand user"
[ -d /run/stagehand ] || ci_die "postinst did not create /run/stagehand"
/usr/bin/stagehand check-config /etc/slurm/stagehand.toml
grep -q '^#required '"$plugin"' config=/etc/slurm/stagehand.toml$' /etc/slurm/plugstack.conf.d/stagehand.conf ||
  ci_die "plugstack.conf.d/stagehand.conf is not the commented line for $plugin"
systemd-analyze verify /lib/systemd/system/stagehandd.service || ci_die "systemd-analyze verify failed"

status=0
(
  cluster=$CI_ROOT/tests/cluster/cluster.sh
  STAGEHAND_SLURM_PREFIX= "$cluster" start --installed "$plugin"
  trap '"$cluster" stop' EXIT
  eval "$("$cluster" env)"
  export STAGEHAND_SOURCE_DIR=$CI_ROOT
  PATH=/usr/bin:/usr/sbin:/bin:/sbin bats --tap "$CI_ROOT"/tests/package/*.bats
) || status=$?

# State as the daemon leaves it: the purge must remove it.
mkdir -p /var/lib/stagehand/registry && echo 1 >/var/lib/stagehand/registry/job_1
apt_get purge stagehand
left=()
while read -r f; do
  [ -e "$f" ] || [ -L "$f" ] || continue
  # Directories shared with other packages (/usr, /etc/slurm, Slurm's plugin directory) stay.
  if [ -d "$f" ] && dpkg -S "$f" >/dev/null 2>&1; then continue; fi
  left+=("$f")
done <<<"$files"
for f in /var/lib/stagehand /run/stagehand /etc/slurm/stagehand.toml /etc/slurm/plugstack.conf.d/stagehand.conf; do
  [ ! -e "$f" ] || left+=("$f")
done
dpkg-query -W stagehand >/dev/null 2>&1 && left+=("dpkg still lists stagehand: $(dpkg-query -W -f='${Status}' stagehand)")
[ ${#left[@]} -eq 0 ] || ci_die "purge left: ${left[*]}"
[ "$status" -eq 0 ] || ci_die "the job with the installed plugin failed"
ci_result "package install: two-node job from the installed plugin and CLI ok, systemd-analyze verify clean, purge left nothing"
