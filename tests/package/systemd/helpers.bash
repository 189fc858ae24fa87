# Helpers for admin.bats, which runs INSIDE the systemd guest that scripts/ci/package-systemd.sh
# boots (never on a real machine: it installs and purges the package, rewrites /etc/slurm and adds
# a user). The guest's root is a throw-away overlay of the host's.

# shellcheck disable=SC2034 # (used by admin.bats)
GUEST_DIR=/srv/stagehand-systemd
STATE=$GUEST_DIR/state
TEST_USER=shuser
USER_HOME=/home/$TEST_USER
WORKDIR=$USER_HOME/work
NODE=$(hostname -s)
ARCH=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -dumpmachine)
PLUGIN=/usr/lib/$ARCH/slurm-wlm/stagehand.so
CONFIG=/etc/slurm/stagehand.toml
mkdir -p "$STATE"

# note TEXT: a line in the TAP output (a comment), shown whether the test passes or not.
note() {
  echo "# $*" >&3
}

# need STEP: fails at once, saying so, when an earlier setup test (STEP) did not pass.
need() {
  [ -e "$STATE/$1.done" ] || {
    echo "the setup step '$1' did not pass (see its test above)" >&2
    return 1
  }
}

# as_user COMMAND...: COMMAND as the test user, in ~/work, with a clean environment.
as_user() {
  runuser -u "$TEST_USER" -- env -i -C "$WORKDIR" PATH=/usr/bin:/bin HOME="$USER_HOME" USER="$TEST_USER" \
    LOGNAME="$TEST_USER" LANG=C.UTF-8 "$@"
}

# wait_job ID [SECONDS]: waits until the job has ended (epilog included: Slurm shows COMPLETING
# until it is done); sets JOB_STATE (COMPLETED, FAILED, CANCELLED, ...) and JOB_EXIT ("0:0").
wait_job() {
  local id=$1 end=$((SECONDS + ${2:-120})) line
  while [ "$SECONDS" -lt "$end" ]; do
    line=$(timeout 10 scontrol -o show job "$id" 2>/dev/null || true)
    JOB_STATE=$(sed -n 's/.* JobState=\([A-Z_]*\).*/\1/p' <<<"$line")
    JOB_EXIT=$(sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p' <<<"$line")
    case "$JOB_STATE" in
    COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE | PREEMPTED) return 0 ;;
    esac
    sleep 0.2
  done
  echo "job $id has not ended after ${2:-120}s: $line" >&2
  return 1
}

# submit NAME [SBATCH OPTION...] <SCRIPT: the script on stdin, submitted by the test user from
# ~/work with sbatch; waits for its end. Sets JOB_ID, JOB_STATE, JOB_EXIT, LAST_OUTPUT (the job's
# output file) and prints the output (bats shows it when the test fails).
submit() {
  local name=$1
  shift
  cat >"$WORKDIR/$name.sh"
  chown "$TEST_USER:" "$WORKDIR/$name.sh"
  JOB_ID=$(as_user sbatch --parsable -o "slurm-%j.out" "$@" "$name.sh")
  JOB_ID=${JOB_ID%%;*}
  echo "submitted $name as job $JOB_ID: sbatch $*"
  wait_job "$JOB_ID"
  LAST_OUTPUT=$(cat "$WORKDIR/slurm-$JOB_ID.out" 2>/dev/null || true)
  echo "job $JOB_ID: $JOB_STATE, exit $JOB_EXIT; its output:"
  echo "$LAST_OUTPUT"
}

# wait_stage_out JOB FILE: waits (up to 90 s) until FILE has arrived, or the daemon no longer holds
# the job's stage-out (done, or given up after its retries); prints what the daemon said about it.
wait_stage_out() {
  local job=$1 file=$2 end=$((SECONDS + 90))
  while [ "$SECONDS" -lt "$end" ]; do
    [ ! -e "$file" ] || break
    timeout 10 stagehand status --json 2>/dev/null | jq -e --argjson j "$job" \
      '.jobs[] | select(.job_id == $j and (.state | startswith("stage-out pending") or . == "running"))' >/dev/null || break
    sleep 0.2
  done
  echo "stagehandd on job $job:"
  journalctl -u stagehandd --no-pager -o cat | grep -F "job $job:" || true
}

# job_entries JOB: what the node's base (/local/stagehand) holds of the job: its directory, or the
# directory renamed aside for its stage-out or into the trash.
job_entries() {
  local e
  for e in /local/stagehand/job_"$1" /local/stagehand/.*job_"$1" /local/stagehand/.*job_"$1".*; do
    if [ -e "$e" ]; then echo "$e"; fi
  done
  return 0
}

# daemon_log: stagehandd's journal, the messages only.
daemon_log() {
  journalctl -u stagehandd --no-pager -o cat
}
