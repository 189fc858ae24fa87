#!/usr/bin/env bash
# Installs the Debian packages stagehand builds and tests with. Idempotent; run as root.
set -euo pipefail

packages=(
  build-essential cmake pkg-config ccache
  libslurm-dev slurmctld slurmd slurm-client munge
  libspdlog-dev libtomlplusplus-dev libarchive-dev
  tar libarchive-tools zip unzip zstd xz-utils bzip2 gzip
  libgtest-dev googletest bats clang libclang-rt-14-dev
  # scripts/function-lengths.sh (a unit test): no function over 80 lines
  universal-ctags
  # the sanitizer phase: clang 19's ASan locks its allocator around fork (LLVM 18 and later), so
  # stagehandd, which forks its user-side children from a multithreaded process, runs under it
  clang-19 libclang-rt-19-dev
  python3 python3-torch libtorch-dev libgloo-dev
  procps util-linux passwd hostname
  nlohmann-json3-dev python3-fusepy fuse libfuse2
  # root-path tests: a btrfs subvolume inside a job directory (on a loop-mounted image)
  btrfs-progs
  # Slurm 25.11 built for the second test run (scripts/ci/build-slurm.sh): its build dependencies,
  # and curl to download SchedMD's tarball where no local copy is given (scripts/slurm-sources.txt)
  curl ca-certificates
  libmunge-dev libjson-c-dev libyaml-dev libhttp-parser-dev libjwt-dev liblz4-dev zlib1g-dev
  libreadline-dev
  # man pages, packages and their checks
  scdoc man-db groff-base dpkg-dev lintian rpm systemd
  # the package under systemd (scripts/ci/package-systemd.sh): the guest's network set-up (ip) and
  # the daemon's JSON status read by its tests (the guest is a copy of this machine's root)
  iproute2 jq
)

missing=()
for p in "${packages[@]}"; do
  [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages (${missing[*]}); run this script as root" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
