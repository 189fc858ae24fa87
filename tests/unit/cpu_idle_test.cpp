// The node's idle CPUs, from /proc/stat's counters.
#include "stagehand/util/cpu_idle.hpp"

#include "stagehand/fs/io.hpp"
#include "stagehand/util/fd.hpp"

#include <fcntl.h>

#include <gtest/gtest.h>

using namespace stagehand;

TEST(CpuIdle, ParsesTheSumsAndCountsTheCpus)
{
  auto t = parse_proc_stat("cpu  1064 0 1131 25763 146 0 20 117 0 0\n"
                           "cpu0 354 0 478 13226 5 0 5 50 0 0\n"
                           "cpu1 710 0 652 12537 140 0 14 66 0 0\n"
                           "intr 72879 0 0 0\nctxt 1\nprocs_running 2\n");
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->idle, 25763U + 146U);
  EXPECT_EQ(t->total, 1064U + 1131U + 25763U + 146U + 20U + 117U);
  EXPECT_EQ(t->cpus, 2U);
}

TEST(CpuIdle, AShorterLineOfAnOldKernelStillCounts)
{
  auto t = parse_proc_stat("cpu 10 0 10 80 0\ncpu0 10 0 10 80 0\n");
  ASSERT_TRUE(t) << t.error().message;
  EXPECT_EQ(t->idle, 80U);
  EXPECT_EQ(t->total, 100U);
}

TEST(CpuIdle, TextWithoutCpuLinesIsRefusedInWords)
{
  EXPECT_FALSE(parse_proc_stat(""));
  EXPECT_FALSE(parse_proc_stat("intr 1 2 3\n"));
  auto bad = parse_proc_stat("cpu x y z\ncpu0 1 2 3 4\n");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("/proc/stat"), std::string::npos);
}

TEST(CpuIdle, IdleCpusIsTheIdleShareOfTheTicksTimesTheCpus)
{
  const CpuTimes a{1000, 4000, 4};
  EXPECT_DOUBLE_EQ(idle_cpus(a, {1300, 4400, 4}), 3.0); // 300 of 400 ticks idle on 4 CPUs
  EXPECT_DOUBLE_EQ(idle_cpus(a, {1000, 4400, 4}), 0.0); // all busy
  EXPECT_DOUBLE_EQ(idle_cpus(a, a), 0.0);                // no tick: nothing known, no room
}

TEST(CpuIdle, ThisNodesProcStatParses)
{
  UniqueFd fd(::open("/proc/stat", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(fd.valid());
  auto text = fs::read_all(fd.get(), "/proc/stat");
  ASSERT_TRUE(text) << text.error().message;
  auto a = parse_proc_stat(*text);
  ASSERT_TRUE(a) << a.error().message;
  EXPECT_GE(a->cpus, 1U);
  EXPECT_GT(a->total, a->idle);
}
