#!/usr/bin/env bash
# Slurm's own regression tests (testsuite/python, pytest, auto-config mode) on a two-node test
# cluster, with and without stagehand: stagehand loads into every job on a node, so Slurm must
# still behave as Slurm with it. As root, on the machine that builds stagehand (Debian 12 here).
#
#   scripts/slurm-testsuite.sh BUILD_DIR TESTSUITE_DIR [TEST ...]
#
# BUILD_DIR: a stagehand build (its Slurm, from its CMakeCache, runs the cluster: clients and
# daemons of the same release). TESTSUITE_DIR: Slurm's testsuite/python of that release, from a
# checkout of SchedMD's git (release tarballs and tags since 25.11 do not carry it: take it at the
# release's branch point, e.g. `git archive $(git merge-base master slurm-25-11-0-0rc1)
# testsuite/python`). TEST: file names in TESTSUITE_DIR/tests (default: the list below: sbatch,
# srun, salloc, steps, arrays, heterogeneous jobs, requeue, prolog/epilog, SPANK, sbcast).
#
# Each test file runs in each pass, on the same cluster (tests/cluster/cluster.sh: munge,
# slurmctld, node1 and node2; pytest's auto-config stops and starts the daemons and edits
# slurm.conf as each test needs, and puts it back):
#   without   plugstack.conf empty, no stagehandd
#   with      stagehand.so in plugstack.conf, stagehandd on both nodes, no stagehand option given
#   forced    as "with", and the options on for every job as a site would set them: [tmpdir]
#             default = true in stagehand.toml, and --ddp-env through Slurm's SPANK option
#             variable SLURM_SPANK__SLURM_SPANK_OPTION_stagehand_ddp_env in the submitting
#             environment (what a site's profile script would export)
# STAGEHAND_TESTSUITE_PASSES picks passes (default "without with forced");
# STAGEHAND_TESTSUITE_TIMEOUT bounds each test file (default 600 s).
#
# Prints a table (test, one column a pass: passed, failed, skipped, error) and writes it with the
# JUnit files to STAGEHAND_TESTSUITE_OUT (default /tmp/stagehand-testsuite-results). Exit status 1
# when a test that passed without stagehand did not pass with it ("with"; "forced" differences
# are behaviour the options change on purpose or not: read them).
#
# The tests run as the user stagehand-atf with password-less sudo (Slurm's testsuite needs it: it
# runs commands as root and as the test user through sudo); the sudoers entry and a profile.d
# line (this Slurm's clients first in PATH where SLURM_CONF is this cluster's) go at exit.
# The cluster: STAGEHAND_CLUSTER_DIR (default /tmp/stagehand-testsuite), STAGEHAND_CLUSTER_PORT
# (default 47717). Needs sudo and the python modules of the testsuite (apt-get install sudo python3-pytest
# python3-jsondiff python3-requests python3-pexpect mariadb-client-core: the suite restores an
# accounting database with mysql after each test, and finds none here).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: slurm-testsuite.sh BUILD_DIR TESTSUITE_DIR [TEST ...]}" && pwd)
suite=$(cd "${2:?usage: slurm-testsuite.sh BUILD_DIR TESTSUITE_DIR [TEST ...]}" && pwd)
shift 2
[ "$(id -u)" -eq 0 ] || { echo "slurm-testsuite.sh: run as root" >&2; exit 1; }
[ -f "$suite/lib/atf.py" ] && [ -d "$suite/tests" ] || { echo "slurm-testsuite.sh: $suite is not Slurm's testsuite/python (no lib/atf.py, tests/)" >&2; exit 1; }
command -v pytest-3 >/dev/null && command -v sudo >/dev/null && command -v mysql >/dev/null &&
  /usr/bin/python3 -c 'import jsondiff, requests, pexpect' 2>/dev/null ||
  { echo "slurm-testsuite.sh: needs pytest-3 and sudo (apt-get install sudo python3-pytest python3-jsondiff python3-requests python3-pexpect mariadb-client-core)" >&2; exit 1; }

# The default subset: what a two-node cluster without accounting (slurmdbd) can serve, for the
# parts of Slurm a SPANK plugin reaches: job submission and steps, arrays, heterogeneous jobs,
# requeue, prolog/epilog, SPANK itself, sbcast.
default_tests=(
  test_103_1.py test_103_2.py                                   # salloc
  test_105_4.py test_105_5.py test_105_6.py                     # sbatch
  test_106_1.py                                                 # sbcast
  test_108_2.py test_108_3.py test_108_4.py test_108_5.py       # scontrol: jobs, steps, hold, requeue
  test_114_1.py test_114_2.py test_114_3.py                     # squeue
  test_116_1.py test_116_3.py test_116_4.py test_116_8.py test_116_11.py test_116_12.py
  test_116_13.py test_116_15.py test_116_16.py test_116_17.py test_116_18.py test_116_19.py
  test_116_20.py test_116_21.py test_116_22.py test_116_23.py test_116_24.py test_116_25.py
  test_116_28.py test_116_30.py test_116_31.py test_116_32.py test_116_34.py test_116_37.py
  test_116_39.py test_116_40.py test_116_41.py test_116_44.py test_116_47.py # srun, steps
  test_122_1.py                                                 # job arrays
  test_127_1.py test_132_1.py test_135_1.py                     # Epilog, Prolog, TaskEpilog
  test_145_1.py test_145_2.py                                   # heterogeneous jobs
  test_147_1.py test_147_2.py                                   # SPANK in job containers, prolog flags
)
tests=("$@")
[ ${#tests[@]} -gt 0 ] || tests=("${default_tests[@]}")
for t in "${tests[@]}"; do
  [ -f "$suite/tests/$t" ] || { echo "slurm-testsuite.sh: no $suite/tests/$t" >&2; exit 1; }
done
read -r -a passes <<<"${STAGEHAND_TESTSUITE_PASSES:-without with forced}"

export STAGEHAND_CLUSTER_DIR=${STAGEHAND_CLUSTER_DIR:-/tmp/stagehand-testsuite}
export STAGEHAND_CLUSTER_PORT=${STAGEHAND_CLUSTER_PORT:-47717}
export STAGEHAND_TEST_USER=stagehand-atf
out=${STAGEHAND_TESTSUITE_OUT:-/tmp/stagehand-testsuite-results}
prefix=$(sed -n 's/^SLURM_ROOT:PATH=//p' "$build/CMakeCache.txt")
[ "$prefix" != /usr ] || prefix=
export STAGEHAND_SLURM_PREFIX=$prefix
cluster=$root/tests/cluster/cluster.sh
sudoers=/etc/sudoers.d/stagehand-testsuite
profile=/etc/profile.d/stagehand-testsuite.sh

cleanup() {
  "$cluster" stop >/dev/null 2>&1 || true
  rm -f "$sudoers" "$profile" "$STAGEHAND_CLUSTER_DIR"/etc/*.orig-atf
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$cluster" start "$build/plugin/stagehand.so"
eval "$("$cluster" env)"
# The testsuite runs Slurm's daemons and clients through `sudo -u USER bash -lc`: they must find
# this cluster's slurm.conf, not the install's default, and this Slurm's clients first in PATH
# (sudo's secure_path would put Debian's first).
path="${prefix:+$prefix/bin:$prefix/sbin:}/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
printf '%s\n' "Defaults:$STAGEHAND_TEST_USER env_keep += \"SLURM_CONF\"" \
  "Defaults:$STAGEHAND_TEST_USER secure_path=\"$path\"" \
  "$STAGEHAND_TEST_USER ALL=(ALL) NOPASSWD: ALL" >"$sudoers"
chmod 0440 "$sudoers"
visudo -cf "$sudoers" >/dev/null
# (and `bash -l` takes PATH from /etc/profile, which reads /etc/profile.d/ last)
printf '[ "$SLURM_CONF" != "%s" ] || PATH="%s"\n' "$SLURM_CONF" "$path" >"$profile"
rm -rf "$out"
mkdir -p "$out"
chmod 0777 "$out"
conf=$out/testsuite.conf
# (no SlurmTestUser: the tests run as the user who runs pytest, without sudo; with it, a
# `pgrep -f 'slurmd -N node1'` run through sudo finds sudo itself)
printf 'SlurmInstallDir=%s\nSlurmConfigDir=%s\n' "${prefix:-/usr}" "$STAGEHAND_CLUSTER_DIR/etc" >"$conf"
chmod 0644 "$conf"
# pytest writes its temporary directories and caches as the test user.
work=$STAGEHAND_CLUSTER_DIR/atf
mkdir -p "$work"
chown "$STAGEHAND_TEST_USER:" "$work"
cp -r "$suite" "$work/python"
chown -R "$STAGEHAND_TEST_USER:" "$work/python"

# The testsuite reads TmpFS (it makes and removes the directory of each node) and expects the
# nodes it adds (node3, ...) in the partition; the daemons it starts read the file again.
echo "TmpFS=$STAGEHAND_CLUSTER_DIR/spool/%n/tmp" >>"$SLURM_CONF"
# (A backup the suite left, stopped midway, would be put back over this file after the first test
# that changes it.)
rm -f "$STAGEHAND_CLUSTER_DIR"/etc/*.orig-atf
sed -i 's/^PartitionName=debug Nodes=[^ ]*/PartitionName=debug Nodes=ALL/' "$SLURM_CONF"
mkdir -p "$STAGEHAND_CLUSTER_DIR"/spool/{node1,node2}/tmp

plugstack_line=$(cat "$STAGEHAND_CLUSTER_DIR/etc/plugstack.conf")
config=$STAGEHAND_CLUSTER_DIR/etc/stagehand.toml
cp "$config" "$out/stagehand.toml.orig"

set_pass() {
  local n
  cp "$out/stagehand.toml.orig" "$config"
  case "$1" in
    without)
      : >"$STAGEHAND_CLUSTER_DIR/etc/plugstack.conf"
      for n in node1 node2; do "$cluster" daemon-stop "$n"; done
      ;;
    with | forced)
      echo "$plugstack_line" >"$STAGEHAND_CLUSTER_DIR/etc/plugstack.conf"
      for n in node1 node2; do "$cluster" daemon-stop "$n"; "$cluster" daemon-start "$n"; done
      if [ "$1" = forced ]; then sed -i 's/^default = false$/default = true/' "$config"; fi
      ;;
  esac
}

for pass in "${passes[@]}"; do
  echo "== pass: $pass (${#tests[@]} test files)"
  set_pass "$pass"
  extra=()
  [ "$pass" != forced ] || extra=(SLURM_SPANK__SLURM_SPANK_OPTION_stagehand_ddp_env=)
  for t in "${tests[@]}"; do
    start=$SECONDS
    status=0
    runuser -u "$STAGEHAND_TEST_USER" -- env -i HOME="$work" USER="$STAGEHAND_TEST_USER" LOGNAME="$STAGEHAND_TEST_USER" \
      PATH="$path" \
      SLURM_CONF="$SLURM_CONF" SLURM_TESTSUITE_CONF="$conf" "${extra[@]}" \
      bash -c "cd '$work/python' && timeout ${STAGEHAND_TESTSUITE_TIMEOUT:-600} pytest-3 --auto-config -p no:cacheprovider -q \
        --junitxml='$out/$pass.${t%.py}.xml' 'tests/$t'" >"$out/$pass.${t%.py}.log" 2>&1 || status=$?
    echo "   $t: exit $status in $((SECONDS - start)) s"
  done
done

# The table: one row per test case, one column per pass.
/usr/bin/python3 - "$out" "${passes[@]}" <<'PY' | tee "$out/table.txt"
import glob, os, sys
import xml.etree.ElementTree as ET
out, passes = sys.argv[1], sys.argv[2:]
results = {}
for p in passes:
    for f in sorted(glob.glob(os.path.join(out, p + ".test_*.xml"))):
        for case in ET.parse(f).getroot().iter("testcase"):
            parts = case.get("classname", "").split(".")
            module = [i for i, part in enumerate(parts) if part.startswith("test_")]
            name = "::".join(parts[module[0] if module else -1:] + [case.get("name", "")])
            kind = "passed"
            for child in case:
                if child.tag in ("failure", "error", "skipped"):
                    kind = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
            results.setdefault(name, {})[p] = kind
width = max([len(n) for n in results] + [4])
print(f"{'test':<{width}}  " + "  ".join(f"{p:<8}" for p in passes))
for name in sorted(results):
    print(f"{name:<{width}}  " + "  ".join(f"{results[name].get(p, '-'):<8}" for p in passes))
counts = {p: {} for p in passes}
for r in results.values():
    for p in passes:
        counts[p][r.get(p, "-")] = counts[p].get(r.get(p, "-"), 0) + 1
for p in passes:
    print(f"{p}: " + ", ".join(f"{v} {k}" for k, v in sorted(counts[p].items())))
if "without" in passes and "with" in passes:
    broken = [n for n, r in results.items() if r.get("without") == "passed" and r.get("with") != "passed"]
    print("passed without stagehand, not with it: " + (", ".join(broken) if broken else "none"))
    open(os.path.join(out, "broken"), "w").write("\n".join(broken))
PY
[ ! -s "$out/broken" ]
