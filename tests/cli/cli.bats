#!/usr/bin/env bats
# The stagehand CLI as an admin uses it. Run by ctest with STAGEHAND_BIN set; needs root.

bats_require_minimum_version 1.5.0

setup() {
  : "${STAGEHAND_BIN:?set by ctest}"
  T=$(mktemp -d /dev/shm/stagehand-cli.XXXXXX)
  chmod 0755 "$T"
  cat >"$T/good.toml" <<TOML
[tmpdir]
base = "$T/scratch/%n"
keep_for = "1h"
[daemon]
socket = "$T/run/%n.sock"
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

@test "check-config: every kind of mistake names the file, the line and the key" {
  check() { # TOML, expected message after "FILE:"
    printf '%b' "$1" >"$T/bad.toml"
    chmod 0644 "$T/bad.toml"
    run "$STAGEHAND_BIN" check-config "$T/bad.toml"
    [ "$status" -eq 1 ] || { echo "accepted: $1"; return 1; }
    [ "$output" = "stagehand: error: $T/bad.toml:$2" ] || { echo "got: $output"; echo "expected: ...:$2"; return 1; }
  }
  check '[tmpdir]\nbase = "rel"\n' '2: [tmpdir] base: "rel" is not an absolute path'
  check '[tmpdir]\ndefault = "yes"\n' '2: [tmpdir] default: expected true or false, got string'
  check '[tmpdir]\n\nkeep_for = "1w"\n' '3: [tmpdir] keep_for: bad duration "1w" (expected a number with an optional s, m, h or d suffix)'
  check '[stage]\nmax_bytes = "2X"\n' '2: [stage] max_bytes: bad size "2X" (expected a number with an optional K, M, G or T suffix)'
  check '[stage]\nallowed_roots = ["/ok", "rel"]\n' '2: [stage] allowed_roots: "rel" is not an absolute path'
  check '[stage]\nbroadcast = "sometimes"\n' '2: [stage] broadcast: "sometimes" is not "auto" or "never"'
  check '[stage]\nprogress_interval = -1\n' '2: [stage] progress_interval: duration must not be negative'
  check '[ddp]\nport_min = 0\n' '2: [ddp] port_min: 0 is not a port number (1-65535)'
  check '[ddp]\nport_max = 20000\nport_min = 30000\n' '3: [ddp] port_min: port_min 30000 is above port_max 20000'
  check '[ddp]\n\nmaster_addr = "ib0"\n' '3: [ddp] master_addr: template "ib0" does not contain {host}'
  check '[ddp.env]\n"1BAD" = "x"\n' '2: [ddp.env] 1BAD: not a valid environment variable name'
  check '[ddp.env]\nGOOD = 1\n' '2: [ddp.env] GOOD: expected a string, got integer'
  check '[daemon]\nuser = "root"\n' '2: [daemon] user: "root" is not a usable service user name (and never root)'
  check '[daemon]\nmetrics_file = "m.prom"\n' '2: [daemon] metrics_file: "m.prom" is not an absolute path'
  check '[daemon]\ncache_max_bytes = true\n' '2: [daemon] cache_max_bytes: expected a size like "500G"'
  check '\n[daemon]\nsockets = "/x"\n' '3: [daemon] sockets: unknown key'
  check 'tmpdir = 3\n' '1: tmpdir: expected a table'
  check '\n\nfoo = 1\n' '3: foo: unknown key'
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
  run --separate-stderr "$STAGEHAND_BIN" gc --dry-run --config "$T/good.toml" --node n1
  [ "$status" -eq 0 ]
  [ -z "$output" ]
  ino=$(stat -c %i "$T/scratch/n1/job_78")
  echo "1 $ino" >"$T/scratch/n1/.keep.job_78" # expired long ago
  run --separate-stderr "$STAGEHAND_BIN" gc --dry-run --config "$T/good.toml" --node n1
  [ "$output" = "would remove $T/scratch/n1/job_78 (keep_for expired)" ]
  [ -d "$T/scratch/n1/job_78" ]
  run --separate-stderr "$STAGEHAND_BIN" gc --config "$T/good.toml" --node n1
  [ "$output" = "removed $T/scratch/n1/job_78 (keep_for expired)" ]
  [ ! -e "$T/scratch/n1/job_78" ] && [ ! -e "$T/scratch/n1/.keep.job_78" ]
}

@test "prolog never fails (a failure would drain the node), and says why" {
  export SLURM_JOB_ID=79 SLURM_JOB_UID=4242 SLURM_JOB_GID=4242 SLURMD_NODENAME=n1
  run "$STAGEHAND_BIN" prolog --config "$T/missing.toml"
  [ "$status" -eq 0 ]
  [[ "$output" == *"prolog: job 79: config $T/missing.toml: No such file or directory"* ]]
}

@test "status and cache say, in one line, that no daemon answers" {
  run "$STAGEHAND_BIN" status --config "$T/good.toml" --node n1
  [ "$status" -eq 1 ]
  [[ "$output" == *"stagehandd is not answering on node n1 ($T/run/n1.sock: "* ]]
  run "$STAGEHAND_BIN" cache ls --config "$T/good.toml" --node n1
  [ "$status" -eq 1 ]
  [[ "$output" == *"stagehandd is not answering on node n1"* ]]
}
