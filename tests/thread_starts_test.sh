#!/bin/bash
# The thread-start check lists an unmarked std::thread start (a temporary, a named one, an
# assignment), leaves out a marked one, a member declaration, std::thread:: and a comment.
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
  // own thread: the daemon's
  std::thread([] {}).detach();
  std::thread marked([] {}); // own thread: the daemon's
  std::thread m_member;
  unsigned n = std::thread::hardware_concurrency();
  // a std::thread(...) in a comment
}
CPP
if out=$("$script" "$dir"); then
  echo "FAIL: unmarked starts passed: $out"
  exit 1
fi
for line in 3 4 5; do
  echo "$out" | grep -q "^$dir/a.cpp:$line: " || { echo "FAIL: line $line not listed: $out"; exit 1; }
done
[ "$(echo "$out" | grep -c "^$dir/a.cpp:")" -eq 3 ] || { echo "FAIL: more than the 3 listed: $out"; exit 1; }
sed -i '3,5d' "$dir/a.cpp"
"$script" "$dir" > /dev/null || { echo "FAIL: the marked ones were listed"; exit 1; }
echo "ok"
