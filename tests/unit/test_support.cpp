// Test helpers implementation.
#include "test_support.hpp"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <poll.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>
#include <thread>

namespace {

thread_local std::uint64_t t_alloc_countdown = 0;
thread_local bool t_alloc_failed = false;

} // namespace

// Replaces the global operator new for the whole test binary so that tests can make one chosen
// allocation fail; unarmed, it is malloc.
void* operator new(std::size_t size)
{
  if (t_alloc_countdown != 0 && --t_alloc_countdown == 0) {
    t_alloc_failed = true;
    throw std::bad_alloc();
  }
  if (void* p = std::malloc(size == 0 ? 1 : size)) {
    return p;
  }
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

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

void fail_nth_allocation(std::uint64_t n)
{
  t_alloc_countdown = n;
  t_alloc_failed = false;
}

bool allocation_failure_used() { return t_alloc_failed; }

bool wait_until(const std::function<bool()>& done, std::chrono::seconds limit)
{
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

std::optional<std::string> run_with_watchdog(const std::function<std::string()>& fn, std::chrono::seconds limit,
                                             const std::function<void()>& on_hang)
{
  int p[2];
  if (::pipe(p) != 0) {
    return std::nullopt;
  }
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    std::string out = fn();
    (void)!::write(p[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(p[1]);
  std::string out;
  bool finished = false;
  const auto until = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    struct pollfd pfd {p[0], POLLIN, 0};
    if (left.count() <= 0 || ::poll(&pfd, 1, static_cast<int>(left.count())) == 0) {
      break;
    }
    char buf[4096];
    ssize_t n = ::read(p[0], buf, sizeof buf);
    if (n <= 0) {
      finished = n == 0;
      break;
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(p[0]);
  if (!finished) {
    if (on_hang) {
      on_hang();
    }
    ::kill(pid, SIGKILL);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!finished) {
    return std::nullopt;
  }
  return out;
}

namespace {

// The mount id at `path`, or the path of mount `id` (mountinfo's first and fifth fields).
std::string mountinfo_find(const std::string& key, bool by_path)
{
  std::ifstream f("/proc/self/mountinfo");
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream fields(line);
    std::string id, parent, dev, root, point;
    fields >> id >> parent >> dev >> root >> point;
    if (by_path && point == key) {
      return id;
    }
    if (!by_path && id == key) {
      return point;
    }
  }
  return "";
}

} // namespace

bool is_mount_point(const std::string& path) { return !mountinfo_find(path, true).empty(); }

HangingMount::HangingMount(std::string mountpoint) : m_mountpoint(std::move(mountpoint))
{
  m_pid = ::fork();
  if (m_pid == 0) {
    int devnull = ::open("/dev/null", O_RDWR);
    ::dup2(devnull, 0);
    ::dup2(devnull, 1);
    ::setsid();
    ::execl("/usr/bin/python3", "python3", STAGEHAND_TEST_DATA "/hangfs.py", m_mountpoint.c_str(), nullptr);
    ::_exit(127);
  }
  // Up to 60 s: python3 and fusepy start slowly on a loaded CI machine (10 s was once too few).
  for (int i = 0; i < 1200 && m_mount_id.empty(); ++i) {
    m_mount_id = mountinfo_find(m_mountpoint, true);
    if (m_mount_id.empty()) {
      ::usleep(50000);
    }
  }
  m_mounted = !m_mount_id.empty();
}

void HangingMount::release()
{
  if (m_pid > 0) {
    ::kill(m_pid, SIGKILL);
    ::waitpid(m_pid, nullptr, 0);
    m_pid = -1;
  }
  if (m_mounted) { // wherever it is now: the directory holding it may have been renamed
    const std::string now = mountinfo_find(m_mount_id, false);
    ::umount2((now.empty() ? m_mountpoint : now).c_str(), MNT_DETACH);
    m_mounted = false;
  }
}

HangingMount::~HangingMount() { release(); }

} // namespace stagehand::test
