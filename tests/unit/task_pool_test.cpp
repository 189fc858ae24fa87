// TaskPool: every task runs once, a lane's tasks run in order when nothing steals them, the first
// error wins and later tasks are skipped, and a pool without threads runs tasks in the caller.
#include "stagehand/util/task_pool.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <vector>

using namespace stagehand;

TEST(TaskPool, EveryTaskRunsOnceAcrossLanes)
{
  TaskPool pool(3, 1000);
  std::vector<std::atomic<int>> runs(500);
  for (std::size_t i = 0; i < runs.size(); ++i) {
    pool.submit([&runs, i] { ++runs[i]; return ok_status(); }, 1 + i % 7, i % 5);
  }
  ASSERT_TRUE(pool.drain());
  for (std::size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].load(), 1) << i;
  }
}

TEST(TaskPool, OneThreadRunsALaneInOrder)
{
  TaskPool pool(1, 1U << 20);
  std::mutex m;
  std::vector<int> order;
  for (int i = 0; i < 200; ++i) {
    pool.submit([&, i] { std::lock_guard l(m); order.push_back(i); return ok_status(); }, 1, 0);
  }
  ASSERT_TRUE(pool.drain());
  ASSERT_EQ(order.size(), 200U);
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(order[i], i);
  }
}

TEST(TaskPool, TheFirstErrorWinsAndLaterTasksAreSkipped)
{
  TaskPool pool(1, 1U << 20);
  std::atomic<int> after{0};
  pool.submit([] { return Status(Error::io("first", 5)); }, 1);
  pool.submit([] { return Status(Error::io("second", 5)); }, 1);
  pool.submit([&] { ++after; return ok_status(); }, 1);
  auto st = pool.drain();
  ASSERT_FALSE(st);
  EXPECT_EQ(st.error().message, "first");
  EXPECT_EQ(after.load(), 0);
  EXPECT_TRUE(pool.failed());
}

TEST(TaskPool, WithoutThreadsTheCallerRunsTheTask)
{
  TaskPool pool(0, 1);
  EXPECT_FALSE(pool.parallel());
  int ran = 0;
  pool.submit([&] { ++ran; return ok_status(); }, 100);
  EXPECT_EQ(ran, 1);
  EXPECT_TRUE(pool.drain());
}
