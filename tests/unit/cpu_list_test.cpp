// The CPUs a process may run on, read and set, and how logs write them.
#include "stagehand/util/cpu_list.hpp"

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
