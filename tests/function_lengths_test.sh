#!/bin/bash
# The function-length check finds a long function, leaves out one marked "// long: <why>", and
# passes a short one.
set -euo pipefail
script=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
{
  echo "int long_one()"
  echo "{"
  for i in $(seq 1 90); do echo "  int v$i = $i;"; done
  echo "  return 0;"
  echo "}"
  echo "int short_one() { return 1; }"
} > "$dir/a.cpp"
if out=$("$script" 80 "$dir"); then
  echo "FAIL: a 94-line function passed: $out"
  exit 1
fi
grep -q "^94 $dir/a.cpp:1 long_one$" <<<"$out" || { echo "FAIL: not listed as expected: $out"; exit 1; }
! grep -q short_one <<<"$out" || { echo "FAIL: short_one listed"; exit 1; }
sed -i '1i // long: a table' "$dir/a.cpp"
"$script" 80 "$dir" > /dev/null || { echo "FAIL: the marked function was not left out"; exit 1; }
"$script" 100 "$dir" > /dev/null || { echo "FAIL: the limit is not honoured"; exit 1; }
echo "ok"
