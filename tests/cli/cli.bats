#!/usr/bin/env bats
# The stagehand CLI as an admin uses it. Run by ctest with STAGEHAND_BIN set; needs root.

setup() {
  : "${STAGEHAND_BIN:?set by ctest}"
  T=$(mktemp -d /dev/shm/stagehand-cli.XXXXXX)
  chmod 0755 "$T"
  cat >"$T/good.toml" <<TOML
[tmpdir]
base = "$T/scratch/%n"
keep_for = "1h"
TOML
  chmod 0644 "$T/good.toml"
}

teardown() { rm -rf "$T"; }

@test "check-config accepts the shipped example" {
  run "$STAGEHAND_BIN" check-config "$BATS_TEST_DIRNAME/../../conf/stagehand.toml"
  [ "$status" -eq 0 ]
  [[ "$output" == *"stagehand.toml: ok"* ]]
}

@test "check-config names file, line and key of a mistake" {
  printf '[tmpdir]\nbase = "/x"\nkeep_four = "1h"\n' >"$T/bad.toml"
  run "$STAGEHAND_BIN" check-config "$T/bad.toml"
  [ "$status" -eq 1 ]
  [ "$output" = "stagehand: error: $T/bad.toml:3: [tmpdir] keep_four: unknown key" ]
}

@test "check-config refuses a config a user could write" {
  chmod 0666 "$T/good.toml"
  run "$STAGEHAND_BIN" check-config "$T/good.toml"
  [ "$status" -eq 1 ]
  [[ "$output" == *"writable by group or others"* ]]
}

@test "prolog and epilog make and remove the job directory from slurmd's environment" {
  export SLURM_JOB_ID=77 SLURM_JOB_UID=4242 SLURM_JOB_GID=4242 SLURMD_NODENAME=n1
  run "$STAGEHAND_BIN" prolog --config "$T/good.toml"
  [ "$status" -eq 0 ]
  [ "$(stat -c '%u %g %a' "$T/scratch/n1/job_77")" = "4242 4242 700" ]
  run "$STAGEHAND_BIN" epilog --config "$T/good.toml"
  [ "$status" -eq 0 ]
  [ ! -e "$T/scratch/n1/job_77" ]
}

@test "epilog keeps the directory for --tmpdir=keep, gc removes it once expired" {
  export SLURM_JOB_ID=78 SLURM_JOB_UID=4242 SLURM_JOB_GID=4242 SLURMD_NODENAME=n1
  "$STAGEHAND_BIN" prolog --config "$T/good.toml"
  SPANK__SLURM_SPANK_OPTION_stagehand_tmpdir=keep "$STAGEHAND_BIN" epilog --config "$T/good.toml"
  [ -d "$T/scratch/n1/job_78" ]
  run "$STAGEHAND_BIN" gc --dry-run --config "$T/good.toml" --node n1
  [ "$status" -eq 0 ] && [ -z "$output" ]
  echo 1 >"$T/scratch/n1/.keep.job_78" # expired long ago
  run "$STAGEHAND_BIN" gc --dry-run --config "$T/good.toml" --node n1
  [ "$output" = "would remove $T/scratch/n1/job_78" ]
  [ -d "$T/scratch/n1/job_78" ]
  run "$STAGEHAND_BIN" gc --config "$T/good.toml" --node n1
  [ "$output" = "removed $T/scratch/n1/job_78" ]
  [ ! -e "$T/scratch/n1/job_78" ] && [ ! -e "$T/scratch/n1/.keep.job_78" ]
}

@test "prolog never fails (a failure would drain the node), and says why" {
  export SLURM_JOB_ID=79 SLURM_JOB_UID=4242 SLURM_JOB_GID=4242 SLURMD_NODENAME=n1
  run "$STAGEHAND_BIN" prolog --config "$T/missing.toml"
  [ "$status" -eq 0 ]
  [[ "$output" == *"prolog: job 79: config $T/missing.toml: No such file or directory"* ]]
}

@test "status and cache say they need the daemon" {
  run "$STAGEHAND_BIN" status
  [ "$status" -eq 2 ]
  [[ "$output" == *"stagehandd, which this version does not have yet"* ]]
}
