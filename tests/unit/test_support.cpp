// Test helpers implementation.
#include "test_support.hpp"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace stagehand::test {

TempDir::TempDir()
{
  const char* root = std::getenv("STAGEHAND_TEST_TMP");
  // tmpfs by default: the disk here is slow for metadata and noisy.
  std::string tmpl = std::string(root ? root : (::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp")) +
                     "/stagehand-test.XXXXXX";
  if (!::mkdtemp(tmpl.data())) {
    throw std::runtime_error("mkdtemp failed");
  }
  ::chmod(tmpl.c_str(), 0755);
  m_path = tmpl;
}

TempDir::~TempDir()
{
  std::string cmd = "umount -R -l '" + m_path + "'/* 2>/dev/null; chmod -R u+rwx '" + m_path +
                    "' 2>/dev/null; rm -rf '" + m_path + "'";
  (void)std::system(cmd.c_str());
}

bool is_root() { return ::geteuid() == 0; }

namespace {

void drop_to_attacker()
{
  if (::setgroups(0, nullptr) != 0 || ::setresgid(k_attacker_gid, k_attacker_gid, k_attacker_gid) != 0 ||
      ::setresuid(k_attacker_uid, k_attacker_uid, k_attacker_uid) != 0) {
    ::_exit(99);
  }
}

} // namespace

int run_as_attacker(const std::function<bool()>& fn)
{
  pid_t pid = ::fork();
  if (pid == 0) {
    drop_to_attacker();
    ::_exit(fn() ? 0 : 1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

pid_t start_attacker_loop(const std::function<void()>& fn)
{
  pid_t pid = ::fork();
  if (pid == 0) {
    drop_to_attacker();
    for (;;) {
      fn();
    }
  }
  return pid;
}

void stop_child(pid_t pid)
{
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

void write_file(const std::string& path, const std::string& content)
{
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << content;
}

std::string read_file(const std::string& path)
{
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool exists_nofollow(const std::string& path)
{
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

} // namespace stagehand::test
