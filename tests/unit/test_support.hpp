// Test helpers: a fresh temporary directory per test, and running code as an unprivileged
// "attacker" user in a child process.
#pragma once

#include <gtest/gtest.h>

#include <sys/types.h>

#include <functional>
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

#define STAGEHAND_REQUIRE_ROOT()                                                                   \
  do {                                                                                             \
    if (!::stagehand::test::is_root()) {                                                           \
      GTEST_SKIP() << "SKIPPED LOUDLY: this security test needs root (run the suite as root)";     \
    }                                                                                              \
  } while (0)

} // namespace stagehand::test
