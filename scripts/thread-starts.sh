#!/bin/bash
# Lists each std::thread started in the C++ sources under DIR... (default: src, helper, plugin)
# that is not marked as a process's own thread. A thread started in a work process forked from the
# daemon (ipc::spawn_as) must be a stagehand::Thread (src/stagehand/util/thread.hpp): a
# std::thread there can take a parent thread's stack from glibc's cache and free a block twice. A
# std::thread is fine where the process is never such a child (the daemon's own threads, the
# CLI's); its line, or the line above it, then says so: "// own thread: <why>".
# Exit status 1 when one is listed.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || set -- src helper plugin
found=$(find "$@" -name '*.cpp' -o -name '*.hpp' -o -name '*.h' | sort | xargs awk '
  FNR == 1 { prev = "" }
  {
    code = $0
    sub(/\/\/.*/, "", code)
    if (code ~ /std::thread[ \t]*[({]/ || code ~ /std::thread[ \t]+[A-Za-z_][A-Za-z_0-9]*[ \t]*[({]/) {
      if ($0 !~ /own thread:/ && prev !~ /own thread:/) {
        print FILENAME ":" FNR ": " $0
      }
    }
    prev = $0
  }')
if [ -n "$found" ]; then
  echo "a std::thread started where a forked work process may run it (use stagehand::Thread, or mark it"
  echo "\"// own thread: <why>\" where no spawn_as child ever runs it):"
  echo "$found"
  exit 1
fi
echo "thread-starts: every std::thread started is marked as a process's own"
