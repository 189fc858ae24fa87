#!/bin/bash
# Lists each thread the C++ sources under DIR... (default: src, helper, plugin) start or hold in a
# way other than stagehand::Thread, unless marked as a process's own. A thread started in a work
# process forked from the daemon (ipc::spawn_as) must be a stagehand::Thread
# (src/stagehand/util/thread.hpp): a std::thread there can take a parent thread's stack from
# glibc's cache and free a block twice. A std::thread is fine where the process is never such a
# child (the daemon's own threads, the CLI's); its line, or the line above it, then says so:
# "// own thread: <why>". Looked for, outside comments and string literals: std::thread (not
# std::thread::), std::jthread, std::async, and pthread_create (but in util/thread.cpp).
# Exit status 1 when one is listed.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- src helper plugin
found=$(find "$@" \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.c' \) | sort | xargs awk '
  FNR == 1 { prev = "" }
  {
    code = $0
    gsub(/"([^"\\]|\\.)*"/, "\"\"", code) # string literals first: a "//" in one is no comment
    sub(/\/\/.*/, "", code)
    hit = code ~ /std::j?thread([^:A-Za-z_0-9]|$)/ || code ~ /std::async[ \t]*[(<]/ ||
          (code ~ /pthread_create[ \t]*\(/ && FILENAME !~ /util\/thread\.cpp$/)
    if (hit && $0 !~ /own thread:/ && prev !~ /own thread:/) {
      print FILENAME ":" FNR ": " $0
    }
    prev = $0
  }')
if [ -n "$found" ]; then
  echo "a thread started or held where a forked work process may run it (use stagehand::Thread, or mark it"
  echo "\"// own thread: <why>\" where no spawn_as child ever runs it):"
  echo "$found"
  exit 1
fi
echo "thread-starts: every std::thread is marked as a process's own"
