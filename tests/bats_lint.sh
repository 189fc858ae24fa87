#!/usr/bin/env bash
# Fails on a bats assertion that cannot fail. Bats runs a test under errexit (set -e), and bash's
# errexit skips two forms:
#  - a line `! command` (anywhere in the file): a pipeline that starts with `!` is never checked,
#    so it passes whatever the command says. Write `! command || false` or `run ! command`.
#  - an && list that is not the last command of a @test: bash checks only the last command of an
#    && list, so in `[ a ] && [ b ]` a false `[ a ]` passes. Write one command per line, or an
#    `if` for a deliberate condition, or end the line with `# lint: conditional`. Lists whose
#    last command is break, continue, return or exit (a retry loop), conditions (if, elif, while,
#    until), lists with an || (their last command is checked), and && inside quotes, $( ), ( ),
#    [[ ]] or a here-document are not reported.
# Each finding is printed as FILE:LINE: reason.
#   bats_lint.sh FILE...
set -euo pipefail
[ "$#" -gt 0 ] || exit 0
exec awk '
function report(line, msg) { printf "%s:%d: %s\n", FILENAME, line, msg > "/dev/stderr"; bad = 1 }

function reset_file() {
  in_test = 0; hd = ""; hd_tabs = 0; st = ""; buf = ""; nparts = 0; optout = 0; pending = 0
}

function top() { return substr(st, length(st), 1) }
function push(c) { st = st c }
function pop() { st = substr(st, 1, length(st) - 1) }
function is_space(c) { return c == " " || c == "\t" }
function word_start(s, i, p) { p = substr(s, i - 1, 1); return i == 1 || is_space(p) || p == ";" || p == "(" || p == "&" || p == "|" }
function word_end(s, i, n) { n = substr(s, i, 1); return n == "" || is_space(n) || n == ";" || n == ")" || n == "&" || n == "|" }

# Lexes one physical line, carrying the quote/paren stack st across lines. Sets masked: the line
# with everything not at the top level of the command (inside quotes, $( ), ( ), [[ ]]) and any
# comment replaced; sets cont when it ends in a backslash at the top level, and hd when a
# here-document starts.
function lex(s,    n, i, c, c2, out, t, j, d, q) {
  n = length(s); out = ""; cont = 0
  for (i = 1; i <= n; i++) {
    c = substr(s, i, 1); c2 = substr(s, i, 2); t = top()
    if (t == "S") { out = out "x"; if (c == "\047") pop(); continue }
    if (t == "E") {
      if (c == "\\") { out = out "xx"; i++; continue }
      out = out "x"; if (c == "\047") pop(); continue
    }
    if (t == "D") {
      if (c == "\\") { out = out "xx"; i++; continue }
      if (c2 == "$(") { out = out "xx"; i++; push("P"); continue }
      out = out "x"; if (c == "\"") pop(); continue
    }
    # code: the top level (st empty), inside ( ) or $( ) (P), inside [[ ]] (K)
    if (c == "\\") {
      if (i == n) { if (st == "") cont = 1; break }
      out = out "xx"; i++; continue
    }
    if (c == "#" && word_start(s, i)) break
    if (c2 == "$\047") { out = out "xx"; i++; push("E"); continue }
    if (c == "\047") { out = out "x"; push("S"); continue }
    if (c == "\"") { out = out "x"; push("D"); continue }
    if (c == "(") { out = out "x"; push("P"); continue }
    if (c == ")") { if (t == "P") { pop(); out = out "x" } else out = out c; continue }
    if (c2 == "[[" && word_start(s, i) && word_end(s, i + 2)) { out = out "xx"; i++; push("K"); continue }
    if (c2 == "]]" && t == "K" && word_end(s, i + 2)) { out = out "xx"; i++; pop(); continue }
    if (substr(s, i, 3) == "<<<") { out = out (st == "" ? "<<<" : "xxx"); i += 2; continue }
    if (c2 == "<<") {
      j = i + 2; d = ""; q = ""
      if (substr(s, j, 1) == "-") { hd_next_tabs = 1; j++ } else hd_next_tabs = 0
      while (is_space(substr(s, j, 1))) j++
      if (substr(s, j, 1) == "\047" || substr(s, j, 1) == "\"") { q = substr(s, j, 1); j++ }
      while (substr(s, j, 1) ~ /[A-Za-z0-9_]/) { d = d substr(s, j, 1); j++ }
      if (d != "") {
        hd = d; hd_tabs = hd_next_tabs
        if (q != "" && substr(s, j, 1) == q) j++
        while (i < j) { out = out (st == "" ? "<" : "x"); i++ }
        i--; continue
      }
    }
    out = out (st == "" ? c : "x")
  }
  masked = out
}

function trim(s) { sub(/^[ \t]+/, "", s); sub(/[ \t]+$/, "", s); return s }

# The physical line a character of the logical line came from.
function line_at(off,    k, ln) {
  ln = pline[1]
  for (k = 1; k <= nparts; k++) if (poff[k] <= off) ln = pline[k]
  return ln
}

# Checks a finished logical line of a test body: each top-level command (split at ; and &) that
# is an && list, not a condition, not ending in break/continue/return/exit and without ||.
function check_logical(    s, n, i, c, segs, seg_start, k, content, last_content, lead, p, q, rest, where) {
  s = buf; n = length(s); k = 0; seg_start = 1
  for (i = 1; i <= n + 1; i++) {
    c = (i <= n) ? substr(s, i, 1) : ";"
    if (c == ";" || (c == "&" && substr(s, i - 1, 1) !~ /[&>|<]/ && substr(s, i + 1, 1) !~ /[&>]/)) {
      k++; sstart[k] = seg_start; stext[k] = substr(s, seg_start, i - seg_start); seg_start = i + 1
    }
  }
  segs = k; last_content = 0
  for (k = 1; k <= segs; k++) if (trim(stext[k]) != "") last_content = k
  if (last_content == 0) return
  # Something follows: an && list held back as a possible last command is not the last.
  if (pending) { report(pending, msg_and); pending = 0 }
  if (optout) return
  for (k = 1; k <= segs; k++) {
    content = stext[k]
    lead = match(content, /[^ \t]/) ? RSTART : 0
    if (lead == 0) continue
    content = substr(content, lead)
    while (match(content, /^(do|then|else|[{]|time)[ \t]+/)) { lead += RLENGTH; content = substr(content, RLENGTH + 1) }
    if (content ~ /^(if|elif|while|until|for|case|select|function)([ \t]|$)/) continue
    if (index(content, "||")) continue
    p = index(content, "&&")
    if (p == 0) continue
    rest = content
    while ((q = index(rest, "&&")) > 0) rest = substr(rest, q + 2)
    rest = trim(rest)
    if (rest ~ /^(break|continue|return|exit)([ \t;]|$)/) continue
    where = line_at(sstart[k] + lead - 1 + p - 1)
    if (k < last_content) report(where, msg_and)
    else pending = where
  }
}

function start_part() {
  nparts++; pline[nparts] = FNR; poff[nparts] = length(buf) + 1
  if (buf != "") { buf = buf " "; poff[nparts]++ }
}

BEGIN {
  msg_and = "an && list in the middle of a test: a false left side is never checked (errexit looks at the last command of a list only): one command per line, or `if`, or end the line with # lint: conditional"
  msg_not = "a line starting with ! is never checked (errexit ignores a pipeline that starts with !): end it with || false, or use run !"
}

FNR == 1 { reset_file() }

# The older rule, over every line: `! command` without a trailing `|| false`.
/^[ \t]*! / && !/\|\| false[ \t]*$/ { report(FNR, msg_not) }

{
  raw = $0
  if (hd != "") {  # a here-document body: not shell
    t = raw; if (hd_tabs) sub(/^\t+/, "", t)
    if (t == hd) hd = ""
    next
  }
  if (nparts == 0 && st == "") {
    if (!in_test && raw ~ /^@test[ \t].*\{[ \t]*$/) { in_test = 1; pending = 0; lex(raw); st = ""; next }
    if (in_test && raw ~ /^\}[ \t]*(#.*)?$/) { in_test = 0; pending = 0; next }
  }
  lex(raw)
  if (!in_test) next
  start_part()
  buf = buf masked
  if (raw ~ /#[ \t]*lint:[ \t]*conditional[ \t]*$/) optout = 1
  # The command goes on: a trailing backslash, an open quote or paren, or a trailing && || |.
  tb = trim(masked)
  if (cont || st != "" || tb ~ /(&&|\|\||\|)$/) next
  check_logical()
  buf = ""; nparts = 0; optout = 0
}

END { exit bad }
' "$@"
