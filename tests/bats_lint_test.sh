#!/usr/bin/env bash
# Self-test of bats_lint.sh: each bad form is reported (exit 1, FILE:LINE), every allowed form
# passes (exit 0, nothing said).
#   bats_lint_test.sh [PATH/TO/bats_lint.sh]
set -euo pipefail
lint=${1:-$(dirname "$0")/bats_lint.sh}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
failures=0

# expect_bad NAME LINE: the file on stdin is refused, with NAME.bats:LINE named.
expect_bad() {
  local f=$dir/$1.bats out rc=0
  cat >"$f"
  out=$("$lint" "$f" 2>&1) || rc=$?
  if [ "$rc" -ne 1 ] || ! grep -q "^$f:$2: " <<<"$out"; then
    echo "FAIL: $1: expected exit 1 naming $f:$2, got exit $rc: $out"
    failures=$((failures + 1))
  elif [ "$(wc -l <<<"$out")" -ne 1 ]; then
    echo "FAIL: $1: expected one finding, got: $out"
    failures=$((failures + 1))
  else
    echo "ok: $1 refused: $out"
  fi
}

# expect_ok NAME: the file on stdin passes, silently.
expect_ok() {
  local f=$dir/$1.bats out rc=0
  cat >"$f"
  out=$("$lint" "$f" 2>&1) || rc=$?
  if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
    echo "FAIL: $1: expected exit 0 and no output, got exit $rc: $out"
    failures=$((failures + 1))
  else
    echo "ok: $1 accepted"
  fi
}

expect_bad and_list_mid_test 3 <<'EOF'
@test "x" {
  run true
  [ "$status" -eq 0 ] && [ -z "$output" ]
  [ -n "$BATS_TEST_NAME" ]
}
EOF

expect_bad bang_line 3 <<'EOF'
@test "x" {
  run true
  ! grep -q bad <<<"$output"
  [ "$status" -eq 0 ]
}
EOF

expect_bad and_list_last_in_loop_body 3 <<'EOF'
@test "x" {
  for n in 1 2; do
    [ -n "$n" ] && [ "$n" -gt 0 ]
  done
}
EOF

expect_bad and_list_in_one_line_loop 2 <<'EOF'
@test "x" {
  for n in 1 2; do [ -n "$n" ] && [ "$n" -gt 0 ]; done
}
EOF

expect_bad and_list_before_semicolon 2 <<'EOF'
@test "x" {
  mkdir -p "$BATS_TEST_TMPDIR/a" && touch "$BATS_TEST_TMPDIR/a/f"; ls "$BATS_TEST_TMPDIR/a"
}
EOF

expect_bad and_list_continued 2 <<'EOF'
@test "x" {
  [ -n "$HOME" ] &&
    [ -d "$HOME" ]
  true
}
EOF

expect_bad and_list_after_heredoc_and_string 9 <<'EOF'
@test "x" {
  cat >"$BATS_TEST_TMPDIR/s" <<'END'
[ a ] && [ b ]
END
  run bash -c '
    [ a ] && [ b ]
    echo done'
  x="a && b" y=$(true && true)
  [ -n "$x" ] && [ -n "$y" ] # two checks, the first never made
  [ -n "$x" ]
}
EOF

expect_ok allowed_forms <<'EOF'
setup_file() {
  mkdir -p "$BATS_FILE_TMPDIR/x" && touch "$BATS_FILE_TMPDIR/x/f"
  true
}

helper() { [ -n "$1" ] && return 0; [ -n "$2" ] && echo "$2"; false; }

@test "allowed: conditions, retries, nested and quoted lists, opt-out, last command" {
  for _ in 1 2 3; do [ -e /nonexistent ] && break; sleep 0; done
  for i in 1 2; do
    [ "$i" -eq 2 ] && continue
    [ "$i" -eq 1 ] && [ -n "$i" ] && break
  done
  if [ -n "$HOME" ] && [ -d / ]; then true; fi
  if [ -z "$HOME" ]; then
    false
  elif [ -n "$HOME" ] && [ -d / ]; then
    true
  fi
  while [ -n "" ] && false; do :; done
  until [ -d / ] && true; do :; done
  x=$(cd / && pwd)
  (cd / && true)
  [[ -n "$x" && -d / ]]
  [ "$(echo "a && b")" = "a && b" ]
  echo "a && b" 'c && d' "e $(echo "f && g") h"
  printf '%s\n' "--wrap 'cd \$X && y'"
  [ -n "$x" ] && echo set || echo unset
  [ -d /nonexistent ] && rm -rf /nonexistent # lint: conditional
  ! false || false
  # a comment: [ a ] && [ b ]
  cat >/dev/null <<END
[ a ] && [ b ]
$(echo "x") && y
END
  cat >/dev/null <<-'END'
	[ a ] && [ b ]
	END
  grep -q x <<<"x && y"
  run bash -c '
    [ a ] && [ b ]
    echo done'
  python3 -c "
import sys
print('a && b')
" >/dev/null || true
  v=$((1 + 2)); [ $((v && 1)) -eq 1 ]
  [ -n "$x" ] && [ -d / ]
}

@test "allowed: the last command of a test is checked whole" {
  run true
  [ "$status" -eq 0 ] && [ -z "$output" ]
}

@test "allowed: a loop's own last line, with the loop closed on the test's last line" {
  for i in 1 2; do [ "$i" -gt 0 ] && break; done
}
EOF

if [ "$failures" -ne 0 ]; then
  echo "$failures case(s) failed"
  exit 1
fi
echo "all cases passed"
