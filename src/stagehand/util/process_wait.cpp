// pidfd + poll waits with a deadline, and the reaper.
#include "stagehand/util/process_wait.hpp"

#include "stagehand/util/fd.hpp"
#include "stagehand/util/thread.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>
#include <thread>
#include <vector>

namespace stagehand::proc {

namespace {

UniqueFd open_pidfd(pid_t pid)
{
#ifdef SYS_pidfd_open
  return UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))); // CLOEXEC always
#else
  (void)pid;
  return UniqueFd();
#endif
}

int send_signal(pid_t pid, int sig)
{
  auto& hooks = wait_hooks();
  return hooks.kill ? hooks.kill(pid, sig) : ::kill(pid, sig);
}

int ms_left(Clock::time_point until, int cap)
{
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, cap));
}

std::string wall_time()
{
  char buf[32];
  const std::time_t now = std::time(nullptr);
  struct tm tm {};
  ::localtime_r(&now, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

// Survivors of SIGKILL. One per process, never destroyed (its thread may outlive main).
class Reaper
{
public:
  void hand_over(pid_t pid, const std::string& who, const std::string& why)
  {
    std::vector<std::string> lines;
    int wake = -1;
    {
      std::lock_guard lock(m_mutex);
      lines.push_back(why + (m_threaded ? "; reaped when it ends" : ""));
      m_stuck.push_back(Stuck{pid, open_pidfd(pid), who, Clock::now(), Clock::now()});
      m_count = m_stuck.size();
      sweep_locked(lines); // what ended since the last hand-over
      if (m_threaded && !m_thread_started) {
        start_thread_locked();
      }
      wake = m_wake.get();
    }
    if (wake >= 0) { // the thread polls the new one too
      std::uint64_t one = 1;
      (void)!::write(wake, &one, sizeof one);
    }
    say(lines);
  }

  void enable_thread()
  {
    std::lock_guard lock(m_mutex);
    m_threaded = true;
    if (!m_thread_started) {
      start_thread_locked();
    }
  }

  void set_log(std::function<void(const std::string&)> log)
  {
    std::lock_guard lock(m_mutex);
    m_log = std::move(log);
  }

  std::size_t count() const { return m_count.load(); }

private:
  struct Stuck
  {
    pid_t pid;
    UniqueFd pidfd;
    std::string who;
    Clock::time_point since;
    Clock::time_point reported;
  };

  // Reaps every survivor that has ended; says so in `lines`.
  void sweep_locked(std::vector<std::string>& lines)
  {
    for (auto it = m_stuck.begin(); it != m_stuck.end();) {
      int status = 0;
      const pid_t r = ::waitpid(it->pid, &status, WNOHANG);
      if (r == 0 || (r < 0 && errno == EINTR)) {
        if (Clock::now() - it->reported >= k_report_every) {
          it->reported = Clock::now();
          lines.push_back(it->who + " (pid " + std::to_string(it->pid) + ") still has not ended " +
                          std::to_string(seconds_since(it->since)) + " s after SIGKILL (blocked in the kernel)");
        }
        ++it;
        continue;
      }
      lines.push_back(it->who + " (pid " + std::to_string(it->pid) + ") did not end after SIGKILL; reaped at " +
                      wall_time() + ", " + std::to_string(seconds_since(it->since)) + " s later" +
                      (r < 0 ? " (by someone else: " + std::string(std::strerror(errno)) + ")" : ""));
      it = m_stuck.erase(it);
    }
    m_count = m_stuck.size();
  }

  static long long seconds_since(Clock::time_point t)
  {
    return std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - t).count();
  }

  void say(const std::vector<std::string>& lines)
  {
    std::function<void(const std::string&)> log;
    {
      std::lock_guard lock(m_mutex);
      log = m_log;
    }
    for (const auto& l : lines) {
      if (log) {
        log(l);
      }
    }
  }

  void start_thread_locked()
  {
    m_wake = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    try {
      Thread([this] { run(); }).detach(); // its own stack: it may start in a forked child (util/thread.hpp)
      m_thread_started = true;
    } catch (const std::system_error&) {
      // No thread: survivors are swept at the next hand-over instead. Tried again then.
      m_wake.reset();
    }
  }

  void run()
  {
    for (;;) {
      std::vector<struct pollfd> fds;
      bool all_have_pidfd = true;
      {
        std::lock_guard lock(m_mutex);
        fds.push_back(pollfd{m_wake.get(), POLLIN, 0});
        for (const auto& s : m_stuck) {
          if (s.pidfd.valid()) {
            fds.push_back(pollfd{s.pidfd.get(), POLLIN, 0});
          } else {
            all_have_pidfd = false;
          }
        }
      }
      const int timeout = all_have_pidfd ? static_cast<int>(k_poll_every.count()) : 1000;
      (void)::poll(fds.data(), fds.size(), timeout);
      std::uint64_t drained = 0;
      (void)!::read(m_wake.get(), &drained, sizeof drained);
      std::vector<std::string> lines;
      {
        std::lock_guard lock(m_mutex);
        sweep_locked(lines);
      }
      say(lines);
    }
  }

  static constexpr std::chrono::minutes k_report_every{10};
  static constexpr std::chrono::milliseconds k_poll_every{60000};

  std::mutex m_mutex;
  std::vector<Stuck> m_stuck;
  std::atomic<std::size_t> m_count{0};
  std::function<void(const std::string&)> m_log;
  bool m_threaded = false;
  bool m_thread_started = false;
  UniqueFd m_wake;
};

Reaper& reaper()
{
  static Reaper* r = new Reaper; // never destroyed: its thread may run while the process exits
  return *r;
}

} // namespace

WaitHooks& wait_hooks()
{
  static WaitHooks hooks;
  return hooks;
}

std::string describe_status(int status)
{
  if (WIFSIGNALED(status)) {
    const char* name = ::sigabbrev_np(WTERMSIG(status));
    return "killed by signal " + std::to_string(WTERMSIG(status)) + " (SIG" + (name ? name : "?") + ")";
  }
  return "exit status " + std::to_string(WEXITSTATUS(status));
}

namespace {

// Whether a process of the group `pgid` still runs: none when kill(-pgid, 0) finds none, else as
// /proc says (a member that has ended waits there for a parent that may never reap it: init
// where init reaps nothing, as in some containers; it runs no more).
bool group_runs(pid_t pgid)
{
  if (::kill(-pgid, 0) != 0 && errno == ESRCH) {
    return false;
  }
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) {
    return true;
  }
  bool runs = false;
  while (const struct dirent* e = ::readdir(proc)) {
    if (e->d_name[0] < '1' || e->d_name[0] > '9') {
      continue;
    }
    char path[300];
    char stat[512];
    std::snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
    const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
    const ssize_t n = fd < 0 ? -1 : ::read(fd, stat, sizeof stat - 1);
    if (fd >= 0) {
      ::close(fd);
    }
    if (n <= 0) {
      continue; // gone meanwhile
    }
    stat[n] = '\0';
    // "pid (name) state ppid pgrp session tty tpgid flags 4 faults 4 times priority nice threads"
    const char* after_name = std::strrchr(stat, ')');
    char state = 0;
    int ppid = 0;
    int pgrp = 0;
    long threads = 0;
    if (after_name &&
        std::sscanf(after_name + 1, " %c %d %d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %ld", &state,
                    &ppid, &pgrp, &threads) == 4 &&
        pgrp == pgid && ((state != 'Z' && state != 'X') || threads > 1)) { // a leader ended before its threads
      runs = true;
      break;
    }
  }
  ::closedir(proc);
  return runs;
}

// Whether the process group `pgid` stops running within `grace` (its members killed). A group
// that took the id since only makes this wait longer.
bool group_gone(pid_t pgid, std::chrono::milliseconds grace)
{
  const auto until = Clock::now() + grace;
  useconds_t pause = 1000;
  for (;;) {
    if (!group_runs(pgid)) {
      return true;
    }
    if (Clock::now() >= until) {
      return false;
    }
    ::usleep(pause);
    pause = std::min<useconds_t>(pause * 2, 50000);
  }
}

// Our child `pid`, which has ended: what it left in its group killed (`left`), then it is reaped,
// then (killed) what was left waited for: none of it runs on, not even a system call under way.
Result<int> reap_ended(pid_t pid, LeftInGroup left)
{
  if (left == LeftInGroup::killed) {
    (void)::kill(-pid, SIGKILL); // not through wait_hooks: no test's survivor is a grandchild
  }
  int status = 0;
  pid_t reaped = 0;
  while ((reaped = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (reaped != pid) {
    return Error::from_errno("waitpid");
  }
  if (left == LeftInGroup::killed && !group_gone(pid, k_kill_grace)) {
    return Error::io("process " + std::to_string(pid) + " ended, but a process it started did not end " +
                       std::to_string(k_kill_grace.count() / 1000) + " s after SIGKILL",
                     EBUSY);
  }
  return status;
}

} // namespace

Result<int> wait_ended(pid_t pid, LeftInGroup left)
{
  siginfo_t info {};
  // Seen ended, left unreaped (WNOWAIT): its group's id is still its own for the kill.
  while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) != 0) {
    if (errno != EINTR) {
      return Error::from_errno("waitid");
    }
  }
  return reap_ended(pid, left);
}

Result<int> wait_until(pid_t pid, Clock::time_point until, LeftInGroup left)
{
  UniqueFd pidfd = open_pidfd(pid);
  int backoff_ms = 1;
  for (;;) {
    siginfo_t info {};
    const int r = ::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT);
    if (r == 0 && info.si_pid == pid) {
      return reap_ended(pid, left);
    }
    if (r < 0 && errno != EINTR) {
      return Error::from_errno("waitid");
    }
    if (r < 0) {
      continue;
    }
    if (Clock::now() >= until) {
      return Error::io("process " + std::to_string(pid) + " still running", ETIMEDOUT);
    }
    if (pidfd.valid()) {
      struct pollfd p {pidfd.get(), POLLIN, 0};
      (void)::poll(&p, 1, ms_left(until, 1 << 30)); // EINTR: looked at again above
    } else {
      ::usleep(static_cast<useconds_t>(ms_left(until, backoff_ms)) * 1000U);
      backoff_ms = std::min(backoff_ms * 2, 50);
    }
  }
}

namespace {
constexpr std::string_view k_left_behind = "; left behind";
} // namespace

Result<int> kill_and_wait(pid_t pid, const std::string& who, std::chrono::milliseconds grace, LeftInGroup left)
{
  (void)send_signal(pid, SIGKILL);
  auto ended = wait_until(pid, Clock::now() + grace, left);
  if (ended || ended.error().code != ETIMEDOUT) {
    return ended;
  }
  const std::string waited = grace < std::chrono::seconds(1)
                               ? std::to_string(grace.count()) + " ms"
                               : std::to_string(std::chrono::duration_cast<std::chrono::seconds>(grace).count()) + " s";
  const std::string why = who + " (pid " + std::to_string(pid) + ") did not end " + waited +
                          " after SIGKILL: it is blocked in the kernel (a filesystem that does not answer?)";
  reaper().hand_over(pid, who, why);
  return Error::io(why + std::string(k_left_behind), ETIMEDOUT);
}

bool left_behind(const Error& e) { return e.code == ETIMEDOUT && e.message.ends_with(k_left_behind); }

Result<int> wait_or_kill(pid_t pid, const std::string& what, Clock::time_point until, std::chrono::milliseconds grace)
{
  auto ended = wait_until(pid, until);
  if (ended || ended.error().code != ETIMEDOUT) {
    return ended;
  }
  auto killed = kill_and_wait(pid, what, grace);
  if (!killed) {
    return killed.error();
  }
  return Error::io(what + " did not end in time: killed", ETIMEDOUT);
}

void enable_reaper_thread() { reaper().enable_thread(); }

void set_reaper_log(std::function<void(const std::string&)> log) { reaper().set_log(std::move(log)); }

std::size_t stuck_children() { return reaper().count(); }

} // namespace stagehand::proc
