#!/bin/bash
# Functions longer than a limit (default 80 lines, from the line of their name to their closing
# brace) in src/, plugin/ and helper/: one line each, "LINES FILE:LINE NAME", longest first; exit 1
# when there is any. A table or test data that is long by nature is marked on the line before its
# function with "// long: <why>" and left out. Needs universal-ctags (Debian: universal-ctags).
#   scripts/function-lengths.sh [LIMIT [DIR...]]     (DIRs relative to the repository root, or absolute)
set -euo pipefail
limit=${1:-80}
shift || true
cd "$(dirname "$0")/.."
dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || dirs=(src plugin helper)
command -v ctags >/dev/null || { echo "function-lengths: needs ctags (apt-get install universal-ctags)" >&2; exit 2; }
grep -q "Universal Ctags" <<<"$(ctags --version)" || { echo "function-lengths: needs universal-ctags" >&2; exit 2; }
long=$(ctags -R --languages=C++ --kinds-C++=f --fields=+ne -o - "${dirs[@]}" |
  awk -F'\t' -v limit="$limit" '{
    line = ""; end = ""
    for (i = 4; i <= NF; i++) {
      if ($i ~ /^line:/) line = substr($i, 6)
      if ($i ~ /^end:/) end = substr($i, 5)
    }
    if (line != "" && end != "" && end - line + 1 > limit) print end - line + 1 "\t" $2 "\t" line "\t" $1
  }' | sort -t$'\t' -k1,1nr |
  while IFS=$'\t' read -r n file line name; do
    marked=$(sed -n "$((line > 1 ? line - 1 : 1))p" "$file")
    [[ $marked == *"// long: "* ]] || printf '%s %s:%s %s\n' "$n" "$file" "$line" "$name"
  done)
if [ -n "$long" ]; then
  echo "function-lengths: functions over $limit lines in ${dirs[*]}:"
  echo "$long"
  exit 1
fi
echo "function-lengths: no function over $limit lines in ${dirs[*]}"
