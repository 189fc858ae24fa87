// The CPUs a process may run on, read and set, how logs write them, and which the daemon gives a job's work.
#include "stagehand/util/cpu_list.hpp"
#include "stagehand/service/peer.hpp"

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

using namespace stagehand;

TEST(CpuList, RangesAreWrittenAsAdminsReadThem)
{
  EXPECT_EQ(cpu_ranges({}), "");
  EXPECT_EQ(cpu_ranges({3}), "3");
  EXPECT_EQ(cpu_ranges({0, 1, 2, 3}), "0-3");
  EXPECT_EQ(cpu_ranges({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
}

TEST(CpuList, AProcessIsPutOnTheCpusGivenAndOnlyThose)
{
  const std::vector<int> all = affinity_of(::getpid());
  ASSERT_FALSE(all.empty());
  EXPECT_TRUE(run_on({})); // nothing asked: nothing changed
  EXPECT_EQ(affinity_of(::getpid()), all);
  const pid_t pid = ::fork(); // the test process keeps its own CPUs
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const bool ok = run_on({all.front()}) && affinity_of(::getpid()) == std::vector<int>{all.front()} &&
                    !run_on({-1}) && !run_on({1 << 20});
    ::_exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(affinity_of(999999999).empty()); // no such process
}

// The daemon confines a job's work to the CPUs of the process that asked, and only when they are
// that process's (not a pid reused by another user's) and narrower than the daemon's own.
TEST(JobCpus, TheAskersCpusWhenTheyAreNarrowerAndItsOwn)
{
  const std::vector<int> all = affinity_of(::getpid());
  ASSERT_FALSE(all.empty());
  EXPECT_TRUE(service::job_cpus(service::Peer{0, 0, 0, {}}).empty()); // no pid known
  EXPECT_TRUE(service::job_cpus(service::Peer{::getpid(), ::getuid(), ::getgid(), {}}).empty()); // the daemon's own
  EXPECT_TRUE(service::job_cpus(service::Peer{999999999, ::getuid(), ::getgid(), {}}).empty()); // gone
  if (all.size() < 2) {
    GTEST_SKIP() << "one CPU: no narrower set to ask from";
  }
  int gate[2];
  ASSERT_EQ(::pipe(gate), 0);
  const pid_t asker = ::fork(); // a task put on one CPU, as a job's cpuset would
  ASSERT_GE(asker, 0);
  if (asker == 0) {
    ::close(gate[1]);
    char c;
    ::_exit(run_on({all.back()}) && ::read(gate[0], &c, 1) >= 0 ? 0 : 1);
  }
  ::close(gate[0]);
  std::vector<int> got;
  for (int i = 0; i < 1000 && (got = affinity_of(asker)) != std::vector<int>{all.back()}; ++i) {
    ::usleep(1000);
  }
  EXPECT_EQ(service::job_cpus(service::Peer{asker, ::getuid(), ::getgid(), {}}), std::vector<int>{all.back()});
  // Its pid as another user's connection would show it (a pid reused): not confined there.
  EXPECT_TRUE(service::job_cpus(service::Peer{asker, ::getuid() + 4242, ::getgid(), {}}).empty());
  ::close(gate[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(asker, &status, 0), asker);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}
