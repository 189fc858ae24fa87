// The one way a program or a piece of work runs in a child (util/subprocess): what it wrote, how
// it ended in words (a time bound that ran out as a typed outcome where asked), its environment
// and descriptors, bounds that hold, and the proc::Process every child is forked through.
#include "stagehand/util/subprocess.hpp"

#include "stagehand/util/fd.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <vector>

#include <gtest/gtest.h>

using namespace stagehand;
using namespace std::chrono_literals;

namespace {

proc::Program sh(const std::string& script)
{
  proc::Program p;
  p.argv = {"sh", "-c", script};
  return p;
}

} // namespace

TEST(Subprocess, OutputIsCapturedAndTheEndDescribedOneWay)
{
  auto ok = proc::run(sh("echo out; echo err >&2"), 10s);
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(ok->output, "out\n"); // stderr discarded by default
  EXPECT_TRUE(ok->succeeded());
  EXPECT_EQ(ok->describe(), "exit status 0");

  auto both = sh("echo out; echo err >&2; exit 3");
  both.err = proc::Output::capture;
  auto three = proc::run(both, 10s);
  ASSERT_TRUE(three);
  EXPECT_EQ(three->output, "out\nerr\n");
  EXPECT_FALSE(three->succeeded());
  EXPECT_EQ(three->exit_code(), std::optional<int>(3));
  EXPECT_EQ(three->describe(), "exit status 3");

  auto killed = proc::run(sh("kill -9 $$"), 10s);
  ASSERT_TRUE(killed);
  EXPECT_EQ(killed->exit_code(), std::nullopt);
  EXPECT_EQ(killed->describe(), "killed by signal 9 (SIGKILL)");
}

TEST(Subprocess, AProgramThatCannotRunSaysSoAndExits127)
{
  proc::Program p;
  p.argv = {"stagehand-no-such-program"};
  p.err = proc::Output::capture;
  auto r = proc::run(p, 10s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->exit_code(), std::optional<int>(127));
  EXPECT_EQ(r->output, "cannot run stagehand-no-such-program: No such file or directory\n");
}

TEST(Subprocess, EnvironmentDescriptorAndLimitsHookReachTheProgram)
{
  auto p = sh("echo \"[$ONLY][$HOME]\"; cat <&9; ulimit -n");
  p.argv[2] = "echo \"[$ONLY][$HOME]\"; cat /dev/fd/$KEEP; ulimit -n";
  int fds[2];
  ASSERT_EQ(::pipe2(fds, O_CLOEXEC), 0);
  UniqueFd rd(fds[0]);
  UniqueFd wr(fds[1]);
  ASSERT_EQ(::write(wr.get(), "kept\n", 5), 5);
  wr.reset();
  p.env = std::vector<std::string>{"ONLY=this", "PATH=/usr/bin:/bin", "KEEP=" + std::to_string(rd.get())};
  p.keep_fd = rd.get();
  p.before_exec = [] {
    struct rlimit l {64, 64};
    ::setrlimit(RLIMIT_NOFILE, &l);
  };
  auto r = proc::run(p, 10s);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->output, "[this][]\nkept\n64\n");
}

TEST(Subprocess, BoundsHold)
{
  // Past the deadline: killed, an error naming it and the deadline.
  auto slow = proc::run(sh("sleep 60"), 200ms);
  ASSERT_FALSE(slow);
  EXPECT_EQ(slow.error().code, ETIMEDOUT);
  EXPECT_EQ(slow.error().message, "sh: no answer within 200 ms");
  // Output past its limit: killed, a limit error.
  auto chatty = sh("yes");
  chatty.max_output = 1 << 16;
  auto r = proc::run(chatty, 10s);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::limit);
  // Without a deadline, a program whose output is not captured is waited for to its end.
  auto quiet = sh("sleep 0.3; exit 4");
  quiet.out = proc::Output::discard;
  auto ended = proc::run(quiet, std::nullopt);
  ASSERT_TRUE(ended);
  EXPECT_EQ(ended->exit_code(), std::optional<int>(4));
  // ... and one whose output closed has its exit grace to end, then is killed.
  auto lingering = sh("exec >/dev/null; sleep 60");
  lingering.exit_grace = 300ms;
  auto stopped = proc::run(lingering, std::nullopt);
  ASSERT_FALSE(stopped);
  EXPECT_EQ(stopped.error().code, ETIMEDOUT);
  EXPECT_EQ(stopped.error().message, "sh did not end in time: killed");
}

TEST(Subprocess, WorkInAChildReturnsWhatItSaysOrIsStoppedAtItsBound)
{
  auto said = proc::run_function([] { return std::string("removed 3 entries"); }, "the removal", proc::Clock::now() + 10s);
  ASSERT_TRUE(said);
  EXPECT_EQ(said->output, "removed 3 entries");
  EXPECT_TRUE(said->succeeded());
  auto stuck = proc::run_function(
    [] {
      ::pause();
      return std::string("never");
    },
    "the removal", proc::Clock::now() + 300ms);
  ASSERT_FALSE(stuck);
  EXPECT_EQ(stuck.error().code, ETIMEDOUT);
  EXPECT_EQ(stuck.error().message.rfind("the removal: no answer within ", 0), 0U) << stuck.error().message;
}

TEST(Subprocess, ATimeBoundThatRunsOutIsATypedOutcomeWhenAsked)
{
  // A program: what it wrote before its bound ran out, and the bound in its words. A loaded machine
  // may not even start the shell within a short bound, so each try that saw nothing gives it ten
  // times longer: only output lost at the kill fails every try.
  auto slow = sh("echo started; sleep 60");
  slow.on_timeout = proc::OnTimeout::ended;
  bool seen = false;
  for (const auto bound : {200ms, 2000ms, 20000ms}) {
    auto r = proc::run(slow, bound);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(r->kind, proc::EndKind::timed_out);
    EXPECT_TRUE(r->timed_out());
    EXPECT_FALSE(r->succeeded());
    EXPECT_EQ(r->exit_code(), std::nullopt);
    EXPECT_EQ(r->describe(), "no answer within " + std::to_string(bound.count()) + " ms");
    EXPECT_TRUE(r->left_behind.empty());
    if (!r->output.empty()) {
      EXPECT_EQ(r->output, "started\n");
      seen = true;
      break;
    }
  }
  EXPECT_TRUE(seen) << "what the program wrote before its bound ran out was lost";
  // One that ends in time is not a timeout, asked or not.
  auto quick = sh("exit 2");
  quick.on_timeout = proc::OnTimeout::ended;
  auto two = proc::run(quick, 10s);
  ASSERT_TRUE(two);
  EXPECT_EQ(two->kind, proc::EndKind::exited);
  EXPECT_EQ(two->exit_code(), std::optional<int>(2));
  // A function: the same.
  auto stuck = proc::run_function(
    [] {
      ::pause();
      return std::string("never");
    },
    "the removal", proc::Clock::now() + 200ms, proc::OnTimeout::ended);
  ASSERT_TRUE(stuck) << stuck.error().message;
  EXPECT_TRUE(stuck->timed_out());
  auto done = proc::run_function([] { return std::string("removed"); }, "the removal", proc::Clock::now() + 10s,
                                 proc::OnTimeout::ended);
  ASSERT_TRUE(done);
  EXPECT_FALSE(done->timed_out());
  EXPECT_EQ(done->output, "removed");
}

TEST(Subprocess, ATimedOutChildThatOutlivesSigkillSaysItWasLeftBehind)
{
  // Stand-in for a child blocked in the kernel: "SIGKILL" becomes SIGSTOP (see child_test.cpp).
  std::vector<pid_t> stopped;
  proc::wait_hooks().kill = [&](pid_t pid, int sig) {
    if (sig == SIGKILL) {
      stopped.push_back(pid);
      sig = SIGSTOP;
    }
    return ::kill(pid, sig);
  };
  auto r = proc::run_function(
    [] {
      ::pause();
      return std::string("never");
    },
    "the removal", proc::Clock::now() + 200ms, proc::OnTimeout::ended);
  proc::wait_hooks() = {};
  for (pid_t pid : stopped) {
    ::kill(pid, SIGKILL);
  }
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(r->timed_out());
  EXPECT_EQ(r->left_behind.rfind("the removal (pid ", 0), 0U) << r->left_behind;
  EXPECT_TRUE(proc::left_behind(Error::io(r->left_behind, ETIMEDOUT))) << r->left_behind;
  EXPECT_NE(r->describe().find(" did not end 3 s after SIGKILL"), std::string::npos) << r->describe();
}

TEST(SubprocessProcess, WaitSaysHowItEndedAndABoundThatRunsOutKillsIt)
{
  auto three = proc::Process::start("three", proc::Group::shared, [] { ::_exit(3); });
  ASSERT_TRUE(three);
  auto ended = three->wait(std::nullopt);
  ASSERT_TRUE(ended);
  EXPECT_EQ(ended->kind, proc::EndKind::exited);
  EXPECT_EQ(ended->describe(), "exit status 3");
  EXPECT_FALSE(three->running());

  auto pausing = proc::Process::start("pausing", proc::Group::shared, [] {
    for (;;) {
      ::pause();
    }
  });
  ASSERT_TRUE(pausing);
  auto timed = pausing->wait(proc::Clock::now() + 100ms);
  ASSERT_TRUE(timed) << timed.error().message;
  EXPECT_EQ(timed->kind, proc::EndKind::timed_out);
  EXPECT_EQ(proc::describe_status(timed->status), "killed by signal 9 (SIGKILL)");
  EXPECT_EQ(pausing->pid(), -1); // reaped
}

TEST(SubprocessProcess, AStoppedChildIsSeenAsStopped)
{
  auto child = proc::Process::start("stopping", proc::Group::shared, [] {
    ::raise(SIGSTOP);
    ::_exit(0);
  });
  ASSERT_TRUE(child);
  bool seen = false;
  for (int i = 0; i < 1000 && !seen; ++i) {
    seen = child->stopped();
    ::usleep(10000);
  }
  EXPECT_TRUE(seen);
  auto killed = child->kill();
  ASSERT_TRUE(killed) << killed.error().message;
  EXPECT_EQ(killed->describe(), "killed by signal 9 (SIGKILL)");
  EXPECT_FALSE(child->stopped());
}

TEST(SubprocessProcess, AKillOfAChildInItsOwnGroupReachesWhatItForked)
{
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFd rd(p[0]);
  UniqueFd wr(p[1]);
  // The child and its own child (which says it is there) hold the pipe's write end until they end.
  auto child = proc::Process::start("a parent", proc::Group::own, [&] {
    if (::fork() == 0) {
      (void)!::write(wr.get(), "g", 1);
    }
    ::alarm(30); // neither outlives a failed test for long
    for (;;) {
      ::pause();
    }
  });
  ASSERT_TRUE(child);
  wr.reset();
  struct pollfd pfd {rd.get(), POLLIN, 0};
  char c = 0;
  ASSERT_EQ(::poll(&pfd, 1, 10000), 1);
  ASSERT_EQ(::read(rd.get(), &c, 1), 1); // the grandchild runs
  ASSERT_TRUE(child->kill());
  ASSERT_EQ(::poll(&pfd, 1, 10000), 1); // the grandchild is gone too: end of file
  EXPECT_EQ(::read(rd.get(), &c, 1), 0);
}
