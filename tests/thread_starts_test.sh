#!/bin/bash
# The thread-start check lists an unmarked std::thread (a temporary, a named one, an assignment,
# one in a container or made by make_unique, one whose "(" is on the next line, one after a
# string holding "//", a member), std::jthread, std::async and pthread_create; it leaves out a
# marked one, std::thread::, this_thread and comments.
set -euo pipefail
script=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat > "$dir/a.cpp" <<'CPP'
void f()
{
  std::thread([] {}).detach();
  std::thread named([] {});
  m_t = std::thread{[] {}};
  std::vector<std::thread> pool;
  auto p = std::make_unique<std::thread>([] {});
  std::thread
    split([] {});
  log("http://x"); std::thread([] {}).detach();
  std::jthread j([] {});
  auto fut = std::async(std::launch::async, [] {});
  pthread_create(&t, nullptr, run, nullptr);
  std::thread m_member;
  // own thread: the daemon's
  std::thread([] {}).detach();
  std::thread marked([] {}); // own thread: the daemon's
  unsigned n = std::thread::hardware_concurrency();
  std::this_thread::yield();
  // a std::thread(...) in a comment
}
CPP
if out=$("$script" "$dir"); then
  echo "FAIL: unmarked threads passed: $out"
  exit 1
fi
for line in 3 4 5 6 7 8 10 11 12 13 14; do
  grep -q "^$dir/a.cpp:$line: " <<<"$out" || { echo "FAIL: line $line not listed: $out"; exit 1; }
done
[ "$(echo "$out" | grep -c "^$dir/a.cpp:")" -eq 11 ] || { echo "FAIL: more than the 11 listed: $out"; exit 1; }
sed -i '3,14d' "$dir/a.cpp"
"$script" "$dir" > /dev/null || { echo "FAIL: the marked ones were listed"; exit 1; }
echo "ok"
