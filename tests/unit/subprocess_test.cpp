// The one way a program or a piece of work runs in a child (util/subprocess): what it wrote, how
// it ended in words, its environment and descriptors, and bounds that hold.
#include "stagehand/util/subprocess.hpp"

#include "stagehand/util/fd.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

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
