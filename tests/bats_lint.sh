#!/usr/bin/env bash
# Fails on a bats assertion that cannot fail: a line `! command` in the middle of a test is not
# checked (bash's errexit ignores a pipeline that starts with `!`), so it passes whatever the
# command says. Write `! command || false` or `run ! command` instead.
#   bats_lint.sh FILE...
set -euo pipefail
status=0
for f in "$@"; do
  if grep -nE '^\s*! ' "$f" | grep -vE '\|\| false\s*$'; then
    echo "$f: a line starting with '!' is never checked: end it with '|| false'" >&2
    status=1
  fi
done
exit "$status"
