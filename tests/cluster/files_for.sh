#!/usr/bin/env bash
# The cluster test files that run on a Slurm release: every tests/cluster/*.bats but those with a
# line "# requires: Slurm >= X.Y" for a later release (each such file says why). One file name a
# line on stdout; a line on stderr for each file left out.
#   files_for.sh RELEASE        e.g. 22.05.8, 25.11 (the major and minor are compared)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
number() { awk -v v="$1" 'BEGIN { split(v, p, "."); print p[1] * 100 + p[2] }'; }
have=$(number "${1:?usage: files_for.sh RELEASE}")
for f in "$here"/*.bats; do
  need=$(sed -n 's/^# requires: Slurm >= \([0-9][0-9.]*\).*/\1/p' "$f" | head -n1)
  if [ -n "$need" ] && [ "$have" -lt "$(number "$need")" ]; then
    echo "$(basename "$f"): not run on Slurm $1 (requires $need or later; see the file)" >&2
    continue
  fi
  basename "$f"
done
