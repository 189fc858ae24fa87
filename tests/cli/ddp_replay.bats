#!/usr/bin/env bats
# stagehand-ddp-replay on the recorded srun environments: the per-rank exports scripts/gpu-check.sh
# replays with PyTorch. Run by ctest with STAGEHAND_DDP_REPLAY set.

setup() {
  : "${STAGEHAND_DDP_REPLAY:?set by ctest}"
  FIXTURES=$BATS_TEST_DIRNAME/../unit/data/step_env
}

# The value NAME gets for rank R in the replay output $1.
value() { echo "$1" | awk -v r="$2" -v n="$3" '/^# rank /{ cur = $3 } cur == r && index($0, "export " n "=") == 1 { sub(/^[^=]*=/, ""); gsub(/'\''/, ""); print }'; }

@test "uneven layout: one block per recorded task, ranks and local sizes as Slurm placed them" {
  run "$STAGEHAND_DDP_REPLAY" "$FIXTURES" n5-uneven
  [ "$status" -eq 0 ]
  [ "$(echo "$output" | grep -c '^# rank ')" -eq 5 ]
  for r in 0 1 2 3 4; do
    f=$FIXTURES/n5-uneven.rank$r.env
    [ "$(value "$output" $r RANK)" = "$(sed -n 's/^SLURM_PROCID=//p' "$f")" ]
    [ "$(value "$output" $r LOCAL_RANK)" = "$(sed -n 's/^SLURM_LOCALID=//p' "$f")" ]
    [ "$(value "$output" $r WORLD_SIZE)" = 5 ]
    [ "$(value "$output" $r MASTER_ADDR)" = node1 ]
  done
  [ "$(value "$output" 0 LOCAL_WORLD_SIZE)" = 4 ]
  [ "$(value "$output" 4 LOCAL_WORLD_SIZE)" = 1 ]
  [ "$(echo "$output" | grep '^export MASTER_PORT=' | sort -u | wc -l)" -eq 1 ]
  ! echo "$output" | grep -q '^export PET_' || false
}

@test "one task per node: the torchrun set, with node 0 hosting the rendezvous; the output is sourceable" {
  run "$STAGEHAND_DDP_REPLAY" "$FIXTURES" pernode
  [ "$status" -eq 0 ]
  [ "$(value "$output" 0 PET_RDZV_CONF)" = is_host=1,read_timeout=3600,join_timeout=3600 ]
  [ "$(value "$output" 1 PET_RDZV_CONF)" = is_host=0,read_timeout=3600,join_timeout=3600 ]
  [ "$(value "$output" 1 PET_NODE_RANK)" = 1 ]
  [ "$(value "$output" 1 PET_RDZV_ENDPOINT)" = "node1:$(value "$output" 1 MASTER_PORT)" ]
  block=$(echo "$output" | awk '/^# rank 1 /{ on = 1; next } on')
  [ "$(env -i bash -c "$block"$'\n''echo "$RANK $WORLD_SIZE $PET_NNODES $STAGEHAND_DDP_SET"' | cut -d' ' -f1-3)" = "1 2 2" ]
}

@test "tasks mode leaves the torchrun set out; a bad mode or a missing layout is one line" {
  run "$STAGEHAND_DDP_REPLAY" "$FIXTURES" pernode tasks
  [ "$status" -eq 0 ]
  ! echo "$output" | grep -q '^export PET_' || false
  run "$STAGEHAND_DDP_REPLAY" "$FIXTURES" pernode mpi
  [ "$status" -eq 2 ]
  [ "$output" = 'stagehand-ddp-replay: --ddp-env: unknown value "mpi" (expected auto, tasks or torchrun)' ]
  run "$STAGEHAND_DDP_REPLAY" "$FIXTURES" n9-missing
  [ "$status" -eq 1 ]
  [ "$output" = "stagehand-ddp-replay: $FIXTURES/n9-missing.rank0.env: no such file" ]
}

@test "heterogeneous step: one world over both components, MASTER_ADDR on rank 0's node" {
  run "$STAGEHAND_DDP_REPLAY" "$FIXTURES" het-reversed
  [ "$status" -eq 0 ]
  for r in 0 1 2 3; do
    [ "$(value "$output" $r RANK)" = $r ]
    [ "$(value "$output" $r WORLD_SIZE)" = 4 ]
    [ "$(value "$output" $r MASTER_ADDR)" = node2 ]
  done
  [ "$(echo "$output" | grep '^export MASTER_PORT=' | sort -u | wc -l)" -eq 1 ]
}

@test "a step inside a task: the enclosing task's values are replaced or unset" {
  run "$STAGEHAND_DDP_REPLAY" "$FIXTURES" nested-inner
  [ "$status" -eq 0 ]
  [ "$(value "$output" 3 RANK)" = 3 ]
  [ "$(value "$output" 3 WORLD_SIZE)" = 4 ]
  [ "$(echo "$output" | grep -c '^unset PET_RDZV_CONF$')" -eq 4 ]
}
