// Children of root that run user work: every wait on them bounded (a survivor of SIGKILL goes to
// the reaper), their memory bounded, and no user attaching to them while they change uid.
#include "stagehand/ipc/child.hpp"
#include "stagehand/util/child_filter.hpp"
#include "stagehand/util/cpu_list.hpp"
#include "stagehand/util/landlock.hpp"
#include "stagehand/util/priority.hpp"
#include "stagehand/util/process_wait.hpp"
#include "stagehand/util/subprocess.hpp"
#include "stagehand/util/thread.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/xattr.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace stagehand;
using namespace stagehand::test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

const ipc::Credentials& attacker()
{
  static const ipc::Credentials user{k_attacker_uid, k_attacker_gid, {k_attacker_gid}, "user attacker", {}};
  return user;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A child blocked in the kernel on a FUSE server that never answers does not end on SIGKILL until
// the call returns. Stand-in: "SIGKILL" becomes SIGSTOP, which a child does not end on either.
// The pids it was sent to are killed for real when the test ends.
class SurvivesSigkill
{
public:
  SurvivesSigkill()
  {
    proc::wait_hooks().kill = [this](pid_t pid, int sig) {
      if (sig == SIGKILL) {
        std::lock_guard lock(m_mutex);
        m_pids.push_back(pid);
        sig = SIGSTOP;
      }
      return ::kill(pid, sig);
    };
  }
  ~SurvivesSigkill()
  {
    proc::wait_hooks() = {};
    for (pid_t pid : pids()) {
      ::kill(pid, SIGKILL);
    }
  }
  std::vector<pid_t> pids()
  {
    std::lock_guard lock(m_mutex);
    return m_pids;
  }

private:
  std::mutex m_mutex;
  std::vector<pid_t> m_pids;
};

// Waits (at most 10 s) until the reaper holds `n` children.
bool stuck_becomes(std::size_t n)
{
  for (int i = 0; i < 1000; ++i) {
    if (proc::stuck_children() == n) {
      return true;
    }
    ::usleep(10000);
  }
  return false;
}

Result<ipc::Child> pausing_child()
{
  return ipc::spawn_as(attacker(), {}, [](int sock, const std::vector<int>&) {
    (void)ipc::send_message(sock, "up");
    for (;;) {
      ::pause();
    }
    return 0;
  });
}

// With a SurvivesSigkill in place and the reaper empty: a pausing child killed with `grace`
// (`said`: that grace in the words of its wait's error): kill returns after about that grace (not
// before it), the child is the reaper's, and its wait says so. Its pid.
pid_t kill_a_survivor(std::chrono::milliseconds grace, const std::string& said_grace)
{
  auto child = pausing_child();
  EXPECT_TRUE(child);
  if (!child || !ipc::receive_message(child->sock(), 10s)) {
    ADD_FAILURE() << "the child did not start";
    return -1;
  }
  const pid_t pid = child->pid();
  const auto t0 = Clock::now();
  child->kill(grace);
  const double took = seconds_since(t0);
  EXPECT_GE(took, std::chrono::duration<double>(grace).count() * 0.8);
  EXPECT_LT(took, 30.0);
  EXPECT_EQ(proc::stuck_children(), 1U);
  auto said = child->wait();
  EXPECT_FALSE(said);
  if (!said) {
    EXPECT_EQ(said.error().code, ETIMEDOUT);
    EXPECT_EQ(said.error().message, "a child of user attacker (pid " + std::to_string(pid) + ") did not end " +
                                      said_grace +
                                      " after SIGKILL: it is blocked in the kernel (a filesystem that does not "
                                      "answer?); left behind");
  }
  return pid;
}

} // namespace

TEST(ChildWait, WaitIsBoundedAndKillsAChildThatNeverExits)
{
  STAGEHAND_REQUIRE_ROOT();
  auto child = pausing_child();
  ASSERT_TRUE(child);
  ASSERT_TRUE(ipc::receive_message(child->sock(), 10s));
  const auto t0 = Clock::now();
  auto ended = child->wait(300ms);
  EXPECT_LT(seconds_since(t0), 30.0); // bounded, not forever (a loaded CI machine is slow)
  ASSERT_FALSE(ended);
  EXPECT_EQ(ended.error().code, ETIMEDOUT);
  EXPECT_EQ(ended.error().message, "a child of user attacker did not exit within 300 ms of its last word: killed");
  EXPECT_EQ(child->pid(), -1); // reaped
}

TEST(ChildWait, AChildThatOutlivesSigkillIsLeftToTheReaperAndKillReturnsWithinItsGrace)
{
  STAGEHAND_REQUIRE_ROOT();
  std::mutex mutex;
  std::vector<std::string> lines;
  proc::set_reaper_log([&](const std::string& line) {
    std::lock_guard lock(mutex);
    lines.push_back(line);
  });
  proc::enable_reaper_thread(); // as the daemon does
  ASSERT_TRUE(stuck_becomes(0)); // what other tests left (killed since) is reaped now
  const std::size_t before = 0;
  pid_t pid = -1;
  {
    SurvivesSigkill immortal;
    pid = kill_a_survivor(proc::k_kill_grace, "3 s"); // was: waitpid with no bound, forever
  } // the "FUSE server" goes: the child ends, and the reaper's thread reaps it
  EXPECT_TRUE(stuck_becomes(before));
  EXPECT_EQ(::kill(pid, 0), -1); // no zombie left
  EXPECT_EQ(errno, ESRCH);
  std::lock_guard lock(mutex);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back().rfind("a child of user attacker (pid " + std::to_string(pid) +
                                 ") did not end after SIGKILL; reaped at ",
                               0),
            0U)
    << lines.back();
  proc::set_reaper_log(nullptr);
}

// The daemon kills a cache fill's follower while it holds the node's lock (every request waits
// meanwhile): it waits a shorter grace, and a survivor goes to the reaper as it would after 3 s.
TEST(ChildWait, AKillWithAShorterGraceLeavesASurvivorToTheReaperAfterThatGrace)
{
  STAGEHAND_REQUIRE_ROOT();
  proc::enable_reaper_thread();
  ASSERT_TRUE(stuck_becomes(0));
  pid_t pid = -1;
  {
    SurvivesSigkill immortal;
    pid = kill_a_survivor(200ms, "200 ms");
  }
  EXPECT_TRUE(stuck_becomes(0));
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST(ChildWait, TheDestructorOfAStuckChildReturnsToo)
{
  STAGEHAND_REQUIRE_ROOT();
  SurvivesSigkill immortal;
  const auto t0 = Clock::now();
  pid_t pid = -1;
  {
    auto child = pausing_child();
    ASSERT_TRUE(child);
    pid = child->pid();
    ASSERT_TRUE(ipc::receive_message(child->sock(), 10s));
  }
  EXPECT_LT(seconds_since(t0), 30.0);
  // "Killed" once, as a process group (-pid) and as itself (pid), and waited for once.
  const auto killed = immortal.pids();
  EXPECT_EQ(std::count(killed.begin(), killed.end(), pid), 1) << killed.size();
}

TEST(ChildWait, RunProgramReturnsAtItsDeadlineEvenWhenTheProgramOutlivesSigkill)
{
  SurvivesSigkill immortal;
  const auto t0 = Clock::now();
  auto r = run_program({"sleep", "60"}, 200ms);
  EXPECT_LT(seconds_since(t0), 30.0);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ETIMEDOUT);
  EXPECT_NE(r.error().message.find("sleep: no answer within 200 ms (sleep (pid "), std::string::npos)
    << r.error().message;
  EXPECT_NE(r.error().message.find("did not end 3 s after SIGKILL"), std::string::npos) << r.error().message;
}

TEST(ChildWait, WaitUntilGivesTheStatusOrTimesOutWithoutReaping)
{
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::usleep(300000);
    ::_exit(3);
  }
  auto early = proc::wait_until(pid, Clock::now() + 50ms);
  ASSERT_FALSE(early);
  EXPECT_EQ(early.error().code, ETIMEDOUT);
  auto ended = proc::wait_until(pid, Clock::now() + 10s);
  ASSERT_TRUE(ended) << ended.error().message;
  EXPECT_EQ(proc::describe_status(*ended), "exit status 3");
}

TEST(ChildHardening, FsSuidDumpableOneRefusesUserWork)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir d;
  write_file(d / "suid_dumpable", "1\n");
  ipc::child_hooks().suid_dumpable = d / "suid_dumpable";
  auto child = ipc::spawn_as(attacker(), {}, [](int sock, const std::vector<int>&) {
    (void)ipc::send_message(sock, "ran");
    return 0;
  });
  ipc::child_hooks() = {};
  ASSERT_TRUE(child);
  auto msg = ipc::receive_message(child->sock(), 10s);
  EXPECT_FALSE(msg); // body never ran
  auto ended = child->wait();
  ASSERT_FALSE(ended);
  EXPECT_EQ(ended.error().kind, ErrorKind::refused);
  EXPECT_EQ(ended.error().message.rfind("fs.suid_dumpable=1: refused to run user work", 0), 0U)
    << ended.error().message;
  // 0 and 2 run it.
  for (const char* safe : {"0\n", "2\n"}) {
    write_file(d / "suid_dumpable", safe);
    ipc::child_hooks().suid_dumpable = d / "suid_dumpable";
    auto ok = ipc::spawn_as(attacker(), {}, [](int sock, const std::vector<int>&) {
      (void)ipc::send_message(sock, "ran");
      return 0;
    });
    ipc::child_hooks() = {};
    ASSERT_TRUE(ok);
    auto ran = ipc::receive_message(ok->sock(), 10s);
    ASSERT_TRUE(ran) << safe;
    EXPECT_EQ(ran->text, "ran");
    EXPECT_EQ(*ok->wait(), 0);
  }
}

// A child compromised through what it reads (a libarchive flaw turned into code) forks a process
// that leaves the child's group (setsid) and holds on to the descriptors it had: a write into a
// cache fill after root sealed it, say. It can leave neither group nor session, nor start a
// process the daemon would have to reap (CLONE_PARENT), and whatever it forked ends when it does.
TEST(ChildHardening, WhatAChildForksCannotLeaveItsGroupAndEndsWithIt)
{
  STAGEHAND_REQUIRE_ROOT();
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFd rd(p[0]);
  UniqueFd wr(p[1]);
  auto child = ipc::spawn_as(attacker(), {wr.get()}, [](int sock, const std::vector<int>& kept) {
    const pid_t forked = ::fork();
    if (forked == 0) { // holds the pipe's write end for as long as it lives
      ::alarm(60);     // never forever, whatever the test finds
      // setpgid first: after a setsid that worked, setpgid would fail whatever the filter says.
      const int pgid = ::setpgid(0, 0) == 0 ? 0 : errno;
      const int sid = ::setsid() >= 0 ? 0 : errno; // the new session's id when it succeeds
      const long sibling = ::syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0);
      if (sibling == 0) {
        ::_exit(0);
      }
      const int parent = sibling > 0 ? 0 : errno;
      const std::string said = std::to_string(::getpid()) + " " + std::to_string(pgid) + " " + std::to_string(sid) +
                               " " + std::to_string(parent) + "\n";
      (void)!::write(kept[0], said.data(), said.size());
      for (;;) {
        ::pause();
      }
    }
    (void)ipc::send_message(sock, forked > 0 ? "forked" : "no fork");
    return 0;
  });
  wr.reset();
  ASSERT_TRUE(child) << child.error().message;
  auto msg = ipc::receive_message(child->sock(), 10s);
  ASSERT_TRUE(msg) << msg.error().message;
  ASSERT_EQ(msg->text, "forked");
  std::string said;
  char c = 0;
  struct pollfd in {rd.get(), POLLIN, 0};
  while (::poll(&in, 1, 10000) == 1 && ::read(rd.get(), &c, 1) == 1 && c != '\n') {
    said += c;
  }
  pid_t grandchild = 0;
  int pgid = -1;
  int sid = -1;
  int parent = -1;
  ASSERT_EQ(std::sscanf(said.c_str(), "%d %d %d %d", &grandchild, &pgid, &sid, &parent), 4) << said;
  EXPECT_EQ(pgid, EPERM) << "setpgid() left the child's group: " << said;
  EXPECT_EQ(sid, EPERM) << "setsid() left the child's group: " << said;
  EXPECT_EQ(parent, EPERM) << "clone(CLONE_PARENT) made a child of the daemon's: " << said;
  auto ended = child->wait();
  ASSERT_TRUE(ended) << ended.error().message;
  EXPECT_EQ(*ended, 0);
  // The child has ended: so has what it forked (the pipe's last write end closed with it).
  struct pollfd hup {rd.get(), POLLIN, 0};
  const int ready = ::poll(&hup, 1, 10000);
  EXPECT_EQ(ready, 1) << "the child's grandchild outlived it";
  if (ready != 1 && grandchild > 0) {
    ::kill(grandchild, SIGKILL);
  }
  EXPECT_EQ(::read(rd.get(), &c, 1), 0);
}

// What a child said in its one message (or why it said nothing), once it has ended.
std::string word_of(Result<ipc::Child>& child)
{
  if (!child) {
    return "spawn: " + child.error().message;
  }
  auto msg = ipc::receive_message(child->sock(), 10s);
  (void)child->wait();
  return msg ? msg->text : "no word: " + msg.error().message;
}

// What a child of the given filter could do to hand a file of its out, or to let another user
// write it: "errno of each step", 0 where the step worked. `listener` is a Unix socket another
// process listens on (the attacker's job, say); `dir` a directory of the child's own.
std::string what_a_child_can_do(const ipc::Credentials& creds, const std::string& listener, int dir)
{
  auto child = ipc::spawn_as(creds, {dir}, [&](int sock, const std::vector<int>& kept) {
    auto err = [](bool ok) { return std::to_string(ok ? 0 : errno); };
    std::string said;
    // A descriptor open for writing, handed to another process (it would survive the seal).
    UniqueFd file(::openat(kept[0], "data", O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
    UniqueFd out(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    said += "socket=" + err(out.valid());
    if (out.valid()) {
      struct sockaddr_un addr {};
      addr.sun_family = AF_UNIX;
      std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", listener.c_str());
      const bool connected = ::connect(out.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof addr) == 0;
      said += " connect=" + err(connected);
      if (connected) {
        said += " handed=" + err(ipc::send_message(out.get(), "take it", {file.get()}).ok());
      }
    }
    struct stat st {};
    ::fstat(file.get(), &st);
    said += " created=" + std::to_string(st.st_mode & 07777);
    said += " io_uring=" + err(::syscall(__NR_io_uring_setup, 1, nullptr) >= 0 || errno == EFAULT);
    said += " chmod_o+w=" + err(::fchmod(file.get(), 0666) == 0);
    said += " chmod_g+w=" + err(::fchmodat(kept[0], "data", 0664, 0) == 0);
    said += " chmod_setuid=" + err(::fchmod(file.get(), 04755) == 0);
    said += " chmod_plain=" + err(::fchmod(file.get(), 0640) == 0);
    said += " create_setgid=" + err(UniqueFd(::openat(kept[0], "g", O_CREAT | O_WRONLY | O_CLOEXEC, 02755)).valid());
    said += " create_g+w=" + err(UniqueFd(::openat(kept[0], "h", O_CREAT | O_WRONLY | O_CLOEXEC, 0664)).valid());
    said += " mkdir_o+w=" + err(::mkdirat(kept[0], "d", 0777) == 0);
    said += " dumpable=" + err(::prctl(PR_SET_DUMPABLE, 1) == 0);
    said += " ptrace=" + err(::ptrace(PTRACE_PEEKUSER, ::getpid(), nullptr, nullptr) != -1 || errno != EPERM);
    said += " getfd=" + err(::syscall(__NR_pidfd_getfd, -1, 0, 0) == 0 || errno != EPERM);
    char* const no_args[] = {nullptr};
    said += " exec=" + err(::execve("/nonexistent", no_args, no_args) == 0 || errno != EPERM);
    said += " fifo=" + err(::mkfifoat(kept[0], "fifo", 0600) == 0);
    said += " xattr=" + err(::fsetxattr(file.get(), "user.x", "1", 1, 0) == 0 || errno == EOPNOTSUPP);
    // setxattrat(2) (Linux 6.13, 463 on every architecture), bad arguments: anything but EPERM
    // where it is let through.
    said += " xattrat=" + std::to_string(::syscall(463, -1, "", 0, nullptr, 0, 0) == 0 ? 0 : errno);
    (void)ipc::send_message(sock, said);
    return 0;
  });
  return word_of(child);
}

TEST(ChildHardening, ACacheChildHandsNoDescriptorOutAndMakesNothingOthersCouldWrite)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir d;
  // The attacker's listener, which any user may connect to.
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  const std::string path = d / "listener";
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path.c_str());
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::chmod(path.c_str(), 0777), 0);
  ASSERT_EQ(::listen(listener.get(), 4), 0);
  auto own_dir = [&](const std::string& name) {
    const std::string p = d / name;
    EXPECT_EQ(::mkdir(p.c_str(), 0700), 0);
    EXPECT_EQ(::chown(p.c_str(), k_attacker_uid, k_attacker_gid), 0);
    return UniqueFd(::open(p.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  };
  // A job user's child keeps what the user has without the daemon: the attack is real there.
  UniqueFd user_dir = own_dir("user");
  const std::string user = what_a_child_can_do(attacker(), path, user_dir.get());
  for (const char* step : {"socket=0", "connect=0", "handed=0", "chmod_o+w=0", "chmod_g+w=0", "chmod_setuid=0",
                           "chmod_plain=0", "create_setgid=0", "create_g+w=0", "mkdir_o+w=0", "dumpable=0", "ptrace=0",
                           "getfd=0", "exec=0", "fifo=0", "xattr=0"}) {
    EXPECT_NE((" " + user + " ").find(std::string(" ") + step + " "), std::string::npos) << step << " in " << user;
  }
  EXPECT_EQ(user.find("xattrat=1"), std::string::npos) << user; // EPERM is the filter's, not the call's
  UniqueFd taken(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_TRUE(taken.valid()) << "the job user's child did not reach the listener: " << user;
  auto handed = ipc::receive_message(taken.get(), 10s);
  ASSERT_TRUE(handed) << handed.error().message;
  EXPECT_EQ(handed->fds.size(), 1U);
  // The service user's child for the cache: none of it.
  ipc::Credentials cache = attacker();
  cache.filter = ChildFilter::cache_work;
  UniqueFd cache_dir = own_dir("cache");
  const std::string filled = what_a_child_can_do(cache, path, cache_dir.get());
  EXPECT_EQ(filled, "socket=1 created=420 io_uring=38 chmod_o+w=1 chmod_g+w=1 chmod_setuid=1 chmod_plain=0 "
                    "create_setgid=1 create_g+w=1 mkdir_o+w=1 dumpable=1 ptrace=1 getfd=1 exec=1 fifo=1 xattr=1 "
                    "xattrat=1");
  UniqueFd none(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
  EXPECT_FALSE(none.valid()) << "a cache child reached the listener";
}

// Where the kernel has Landlock (ABI 2), a cache child makes, links, renames and writes nothing
// outside the directories it was given (its fill): no second name elsewhere for a file of its fill,
// which another process of the service user could open for writing, and no write into a file it
// reaches through such a name. Inside, everything a fill does works.
TEST(ChildHardening, ACacheChildWritesNowhereButBeneathItsFill)
{
  STAGEHAND_REQUIRE_ROOT();
  if (!writes_confinable()) {
    GTEST_SKIP() << "SKIPPED LOUDLY: this kernel has no Landlock ABI 2 (Linux 5.19, landlock in lsm=)";
  }
  TempDir d;
  for (const char* name : {"fill", "elsewhere"}) {
    ASSERT_EQ(::mkdir((d / name).c_str(), 0700), 0);
    ASSERT_EQ(::chown((d / name).c_str(), k_attacker_uid, k_attacker_gid), 0);
  }
  write_file(d / "elsewhere/own", "the service user's own file, elsewhere");
  ASSERT_EQ(::chown((d / "elsewhere/own").c_str(), k_attacker_uid, k_attacker_gid), 0);
  UniqueFd fill(::open((d / "fill").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  const std::string elsewhere = d / "elsewhere";
  auto run = [&](ChildFilter filter) {
    ipc::Credentials creds = attacker();
    creds.filter = filter;
    auto child = ipc::spawn_as(creds, {fill.get()}, [&](int sock, const std::vector<int>& kept) {
      auto err = [](bool ok) { return std::to_string(ok ? 0 : errno); };
      const int in = kept[0];
      const std::string f = filter == ChildFilter::cache_work ? "c" : "u";
      const bool made = UniqueFd(::openat(in, f.c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644)).valid();
      std::string said = "inside=" + err(made && ::mkdirat(in, (f + "d").c_str(), 0755) == 0 &&
                                         ::linkat(in, f.c_str(), in, (f + "d/hard").c_str(), 0) == 0 &&
                                         ::renameat(in, (f + "d/hard").c_str(), in, (f + "moved").c_str()) == 0 &&
                                         ::unlinkat(in, (f + "moved").c_str(), 0) == 0);
      said += " null=" + err(UniqueFd(::open("/dev/null", O_WRONLY | O_CLOEXEC)).valid());
      said += " link_out=" + err(::linkat(in, f.c_str(), AT_FDCWD, (elsewhere + "/" + f + "link").c_str(), 0) == 0);
      said += " create_out=" + err(UniqueFd(::open((elsewhere + "/" + f + "new").c_str(),
                                                   O_CREAT | O_WRONLY | O_CLOEXEC, 0644)).valid());
      said += " write_out=" + err(UniqueFd(::open((elsewhere + "/own").c_str(), O_WRONLY | O_CLOEXEC)).valid());
      said += " read_out=" + err(UniqueFd(::open((elsewhere + "/own").c_str(), O_RDONLY | O_CLOEXEC)).valid());
      (void)ipc::send_message(sock, said);
      return 0;
    });
    return word_of(child);
  };
  // A job user's child: the same steps all work (the test's attacks are real).
  EXPECT_EQ(run(ChildFilter::user_work), "inside=0 null=0 link_out=0 create_out=0 write_out=0 read_out=0");
  EXPECT_EQ(run(ChildFilter::cache_work),
            "inside=0 null=0 link_out=" + std::to_string(EACCES) + " create_out=" + std::to_string(EACCES) +
              " write_out=" + std::to_string(EACCES) + " read_out=0");
}

TEST(ChildHardening, ATracerAttachedWhileTheUidChangesIsRefused)
{
  STAGEHAND_REQUIRE_ROOT();
  // The child stops before its drop; a tracer attaches there (as the job user could between
  // setresuid and PR_SET_DUMPABLE under fs.suid_dumpable=1) and stays attached across it.
  int ready[2];
  int go[2];
  ASSERT_EQ(::pipe2(ready, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(go, O_CLOEXEC), 0);
  UniqueFd ready_r(ready[0]), ready_w(ready[1]), go_r(go[0]), go_w(go[1]);
  ipc::child_hooks().before_drop = [] {
    char c = 'r';
    (void)!::write(4, &c, 1); // kept[0]: ready
    (void)!::read(5, &c, 1);  // kept[1]: go
  };
  auto child = ipc::spawn_as(attacker(), {ready_w.get(), go_r.get()}, [](int sock, const std::vector<int>&) {
    (void)ipc::send_message(sock, "ran");
    return 0;
  });
  ipc::child_hooks() = {};
  ASSERT_TRUE(child);
  ready_w.reset();
  go_r.reset();
  char c = 0;
  ASSERT_EQ(::read(ready_r.get(), &c, 1), 1);
  ASSERT_EQ(::ptrace(PTRACE_SEIZE, child->pid(), nullptr, nullptr), 0) << std::strerror(errno);
  ASSERT_EQ(::write(go_w.get(), "g", 1), 1);
  auto msg = ipc::receive_message(child->sock(), 10s);
  EXPECT_FALSE(msg); // body never ran
  auto ended = child->wait();
  ASSERT_FALSE(ended);
  EXPECT_EQ(ended.error().message,
            "a child of user attacker: a tracer attached while it changed to the user's uid: refused to run user work");
}

TEST(ChildHardening, UserWorkHasAMemoryBoundAndSaysWhenItRunsOut)
{
  STAGEHAND_REQUIRE_ROOT();
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "ASan reports a failed allocation itself instead of failing it";
#endif
  auto child = ipc::spawn_as(attacker(), {}, [](int sock, const std::vector<int>&) {
    // Well within the bound: fine.
    std::vector<char> some(256U << 20, 'x');
    (void)ipc::send_message(sock, "256 MiB: " + std::to_string(some.size() >> 20));
    // A listing of 50 million entries, say: more than the bound.
    std::vector<std::string> huge;
    huge.reserve((ipc::k_child_memory + (1ULL << 30)) / sizeof(std::string));
    (void)ipc::send_message(sock, "unbounded");
    return 0;
  });
  ASSERT_TRUE(child);
  auto first = ipc::receive_message(child->sock(), 30s);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->text, "256 MiB: 256");
  auto second = ipc::receive_message(child->sock(), 30s);
  EXPECT_FALSE(second);
  auto why = child->why_closed(second.error());
  EXPECT_EQ(why.code, ENOMEM) << why.message;
  EXPECT_EQ(why.message,
            "a child of user attacker ran out of memory (work done for users may take 4 GiB more than its parent; "
            "RLIMIT_DATA)");
}

// A child the C++ or C library aborts (an exception out of a thread, a failed check) says why in
// its ending, not only "killed by signal 6": what the library wrote on its way down, on one line
// (the daemon's log and the job's line quote it), never more than the last 300 bytes of it.
TEST(ChildHardening, AnAbortedChildSaysWhatTheLibraryWroteAsItWentDown)
{
  STAGEHAND_REQUIRE_ROOT();
  auto child = ipc::spawn_as(attacker(), {}, [](int, const std::vector<int>&) {
    Thread([] { throw std::runtime_error("the fill's index\nwent past its end"); }).join();
    return 0;
  });
  ASSERT_TRUE(child);
  auto ended = child->wait(30s);
  ASSERT_FALSE(ended);
  EXPECT_EQ(ended.error().message,
            "killed by signal 6 (SIGABRT) (it wrote: terminate called after throwing an instance of "
            "'std::runtime_error' what(): the fill's index went past its end)");

  // One that wrote lines of its own before: the last whole lines within 300 bytes, the abort's.
  auto chatty = ipc::spawn_as(attacker(), {}, [](int, const std::vector<int>&) {
    const std::string line = std::string(999, 'x') + "\n";
    for (int i = 0; i < 20; ++i) {
      (void)!::write(2, line.data(), line.size());
    }
    Thread([] { throw std::runtime_error("late"); }).join();
    return 0;
  });
  ASSERT_TRUE(chatty);
  auto said = chatty->wait(30s);
  ASSERT_FALSE(said);
  EXPECT_EQ(said.error().message, "killed by signal 6 (SIGABRT) (it wrote: terminate called after throwing an "
                                  "instance of 'std::runtime_error' what(): late)");

  // One that wrote more than its stderr holds (64 KiB): its last words are lost, and it says so.
  auto flood = ipc::spawn_as(attacker(), {}, [](int, const std::vector<int>&) {
    const std::string block(1000, 'x');
    for (int i = 0; i < 100; ++i) {
      (void)!::write(2, block.data(), block.size());
    }
    std::abort();
    return 0;
  });
  ASSERT_TRUE(flood);
  auto flooded = flood->wait(30s);
  ASSERT_FALSE(flooded);
  EXPECT_EQ(flooded.error().message, "killed by signal 6 (SIGABRT) (it wrote: more than 64 KiB, its last words lost)");

  // Its last 300 bytes begin inside a character: the quote begins at the next one.
  auto wide = ipc::spawn_as(attacker(), {}, [](int, const std::vector<int>&) {
    std::string text = "x";
    for (int i = 0; i < 200; ++i) {
      text += "\u00e9"; // two bytes each, then one: the 300th from the end is the second of one
    }
    text += "y";
    (void)!::write(2, text.data(), text.size());
    std::abort();
    return 0;
  });
  ASSERT_TRUE(wide);
  auto quoted = wide->wait(30s);
  ASSERT_FALSE(quoted);
  std::string accents;
  for (int i = 0; i < 149; ++i) {
    accents += "\u00e9";
  }
  EXPECT_EQ(quoted.error().message, "killed by signal 6 (SIGABRT) (it wrote: " + accents + "y)");

  // One that ends on a signal without a word: as before.
  auto quiet = ipc::spawn_as(attacker(), {}, [](int, const std::vector<int>&) {
    ::raise(SIGTERM); // (not SIGSEGV, which ASan catches and turns into an exit)
    return 0;
  });
  ASSERT_TRUE(quiet);
  auto plain = quiet->wait(30s);
  ASSERT_FALSE(plain);
  EXPECT_EQ(plain.error().message, "killed by signal 15 (SIGTERM)");
}

// The daemon's request threads run before the work they start (util/priority.hpp): a child doing a
// user's work runs at a job's priority, whatever the thread that started it runs at.
TEST(ChildPriority, AUsersWorkRunsAtAJobsPriorityNotTheDaemonsRequestThreads)
{
  STAGEHAND_REQUIRE_ROOT();
  const int own = thread_nice(); // whatever the test runs at (CI runs some phases at nice 10)
  int child_nice = 99;
  std::thread request_thread([&] {
    ASSERT_TRUE(set_thread_nice(k_control_nice));
    ASSERT_EQ(thread_nice(), k_control_nice);
    auto child = ipc::spawn_as(attacker(), {}, [](int sock, const std::vector<int>&) {
      (void)ipc::send_message(sock, std::to_string(thread_nice()));
      return 0;
    });
    ASSERT_TRUE(child);
    auto said = ipc::receive_message(child->sock(), 30s);
    ASSERT_TRUE(said);
    child_nice = std::stoi(said->text);
  });
  request_thread.join();
  EXPECT_EQ(child_nice, k_job_nice);
  EXPECT_EQ(thread_nice(), own); // the test's own thread: untouched
}

// A job's work that a child does for it runs on the job's cores (the task's affinity, which the
// daemon passes as Credentials::cpus), not on another job's; with none given, where the daemon runs.
TEST(ChildPlacement, AJobsWorkRunsOnTheCpusItWasGiven)
{
  STAGEHAND_REQUIRE_ROOT();
  const std::vector<int> mine = affinity_of(::getpid());
  ASSERT_FALSE(mine.empty());
  auto where = [](const ipc::Credentials& creds) {
    auto child = ipc::spawn_as(creds, {}, [](int sock, const std::vector<int>&) {
      (void)ipc::send_message(sock, cpu_ranges(affinity_of(::getpid())));
      return 0;
    });
    EXPECT_TRUE(child);
    auto said = child ? ipc::receive_message(child->sock(), 30s) : Result<ipc::Message>(Error::internal("none"));
    EXPECT_TRUE(said);
    return said ? said->text : std::string("(nothing said)");
  };
  ipc::Credentials job = attacker();
  job.cpus = {mine.back()};
  EXPECT_EQ(where(job), std::to_string(mine.back()));
  EXPECT_EQ(where(attacker()), cpu_ranges(mine));
  EXPECT_EQ(affinity_of(::getpid()), mine); // the daemon's own: untouched
}
