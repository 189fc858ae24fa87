// Test helpers: a fresh temporary directory per test, and running code as an unprivileged
// "attacker" user in a child process.
#pragma once

#include <gtest/gtest.h>

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace stagehand::test {

// The attacker's ids: no passwd entry needed for setresuid.
inline constexpr uid_t k_attacker_uid = 4242;
inline constexpr gid_t k_attacker_gid = 4242;

class TempDir
{
public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return m_path; }
  std::string operator/(const std::string& rel) const { return m_path + "/" + rel; }

private:
  std::string m_path;
};

bool is_root();

// Runs `fn` in a child with the attacker's credentials; returns the child's exit status (0 when
// fn returned true).
int run_as_attacker(const std::function<bool()>& fn);

// Starts `fn` looping in an attacker child; returns its pid (kill it with stop_child).
pid_t start_attacker_loop(const std::function<void()>& fn);
void stop_child(pid_t pid);

void write_file(const std::string& path, const std::string& content);
std::string read_file(const std::string& path);
bool exists_nofollow(const std::string& path);

// Polls `done` every 20 ms until it is true (true) or `limit` has passed (false).
bool wait_until(const std::function<bool()>& done, std::chrono::seconds limit);

// Runs `fn` in a forked child and returns what it returned. A child still running after `limit`
// is a hang: `on_hang` runs (to unblock it), the child is killed, and the result is nullopt.
std::optional<std::string> run_with_watchdog(const std::function<std::string()>& fn, std::chrono::seconds limit,
                                             const std::function<void()>& on_hang = {});

// tests/unit/data/hangfs.py mounted (as root, allow_other) at an existing directory: every lookup,
// getattr, open and readdir on it hangs until the server dies, as on a user's broken FUSE mount.
// The destructor kills the server and detaches the mount.
class HangingMount
{
public:
  explicit HangingMount(std::string mountpoint);
  ~HangingMount();
  HangingMount(const HangingMount&) = delete;
  HangingMount& operator=(const HangingMount&) = delete;
  bool mounted() const { return m_mounted; }
  // Kills the server: whatever waits on the mount fails (ENOTCONN); the mount is detached.
  void release();

private:
  std::string m_mountpoint;
  std::string m_mount_id; // from /proc/self/mountinfo
  pid_t m_pid = -1;
  bool m_mounted = false;
};

// Whether `path` is a mount point (from /proc/self/mountinfo, which asks no filesystem anything).
bool is_mount_point(const std::string& path);

// Allocation failure injection: the `n`-th operator new of this thread from now on throws
// std::bad_alloc (once); 0 disarms. Returns whether the last armed failure was used.
void fail_nth_allocation(std::uint64_t n);
bool allocation_failure_used();

#define STAGEHAND_REQUIRE_ROOT()                                                                   \
  do {                                                                                             \
    if (!::stagehand::test::is_root()) {                                                           \
      GTEST_SKIP() << "SKIPPED LOUDLY: this security test needs root (run the suite as root)";     \
    }                                                                                              \
  } while (0)

} // namespace stagehand::test
