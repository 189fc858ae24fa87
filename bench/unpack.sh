#!/usr/bin/env bash
# Unpack speed on tmpfs, against the tools users would otherwise use, in the same run:
#   - 60,000 x 2 KiB files in a tar: stagehand (writer threads / one writer) vs GNU tar, bsdtar
#   - the same tree as tar.gz and tar.zst: vs `tar -xzf` and `zstd -dc | tar -x`
# Each command runs ROUNDS times (default 5), interleaved; the median is reported and every
# ratio is against GNU tar (or zstd | tar) on the same archive. Usage: bench/unpack.sh BUILD_DIR [ROUNDS]
set -euo pipefail
. "$(dirname "$0")/lib.sh"
tool=$(cd "${1:?usage: unpack.sh BUILD_DIR [ROUNDS]}" && pwd)/bench/stage_tool
rounds=${2:-5}
[ -x "$tool" ] || { echo "build first: $tool missing" >&2; exit 1; }
work=$(mktemp -d /dev/shm/stagehand-unpack.XXXXXX)
trap 'rm -rf "$work"' EXIT
bench_small_tree "$work/src"
(cd "$work/src" && tar cf "$work/small.tar" . && tar czf "$work/small.tar.gz" . && tar --zstd -cf "$work/small.tar.zst" .)

# KEY (archive kind:tool) and the command, with $A the archive, $D the destination, $T stage_tool.
# tar and bsdtar run as a user's would (--no-same-owner): run by root they give every file the
# archive's owner, a chown per file that a user's tar, and stagehand, never make (0.2 s of 0.9 s).
keys=(tar:gnu-tar tar:bsdtar tar:stagehand tar:stagehand-1-writer gz:gnu-tar gz:stagehand zst:zstd-pipe-tar zst:stagehand)
declare -A cmds=(
  [tar:gnu-tar]='tar --no-same-owner -xf $A -C $D'
  [tar:bsdtar]='bsdtar --no-same-owner -xf $A -C $D'
  [tar:stagehand]='$T unpack $A $D'
  [tar:stagehand-1-writer]='$T unpack $A $D 1'
  [gz:gnu-tar]='tar --no-same-owner -xzf $A -C $D'
  [gz:stagehand]='$T unpack $A $D'
  [zst:zstd-pipe-tar]='zstd -dcq $A | tar --no-same-owner -xf - -C $D'
  [zst:stagehand]='$T unpack $A $D'
)
declare -A archive=([tar]=small.tar [gz]=small.tar.gz [zst]=small.tar.zst)
for r in $(seq 1 "$rounds"); do
  for key in "${keys[@]}"; do
    bench_unpack "$key" "$work/${archive[${key%%:*}]}" "${cmds[$key]}" "$([ "$r" != 1 ] || echo "$work/src")"
  done
done

echo "unpack on tmpfs, 60,000 x 2 KiB files, median of $rounds interleaved runs"
declare -A base=([tar]=tar:gnu-tar [gz]=gz:gnu-tar [zst]=zst:zstd-pipe-tar)
for key in "${keys[@]}"; do
  s=$(bench_median "$key") b=$(bench_median "${base[${key%%:*}]}")
  printf '  %-24s %s s   x%s of %s\n' "$key" "$s" "$(bench_ratio "$s" "$b")" "${base[${key%%:*}]}"
done
