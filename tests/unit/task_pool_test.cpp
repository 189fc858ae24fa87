// TaskPool: every task runs once, the queue is bounded, cancel drops what waits, the first error
// wins and later tasks are skipped, and a pool without threads runs tasks in the caller.
#include "stagehand/util/task_pool.hpp"

#include <gtest/gtest.h>

#include <sched.h>

#include <atomic>
#include <chrono>
#include <thread>
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

// The queue holds at most its cost bound: a submit past it waits until a task is taken.
TEST(TaskPool, SubmitWaitsWhileTheQueueIsFull)
{
  TaskPool pool(1, 2);
  std::mutex gate;
  std::unique_lock hold(gate);
  std::atomic<bool> started{false};
  pool.submit([&] { started = true; std::lock_guard wait(gate); return ok_status(); }, 1); // taken, then blocks
  while (!started) {
    std::this_thread::yield();
  }
  pool.submit([] { return ok_status(); }, 1);
  pool.submit([] { return ok_status(); }, 1); // the queue now holds its bound
  std::atomic<bool> accepted{false};
  std::thread late([&] { pool.submit([] { return ok_status(); }, 1); accepted = true; });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(accepted.load()) << "accepted past the bound while nothing was taken";
  hold.unlock();
  late.join();
  EXPECT_TRUE(accepted.load());
  EXPECT_TRUE(pool.drain());
}

TEST(TaskPool, CancelDropsWhatHasNotStarted)
{
  TaskPool pool(1, 100);
  std::mutex gate;
  std::unique_lock hold(gate);
  std::atomic<bool> started{false};
  std::atomic<int> ran{0};
  pool.submit([&] { started = true; std::lock_guard wait(gate); ++ran; return ok_status(); }, 1);
  while (!started) {
    std::this_thread::yield();
  }
  for (int i = 0; i < 10; ++i) {
    pool.submit([&] { ++ran; return ok_status(); }, 1);
  }
  pool.cancel();
  hold.unlock();
  EXPECT_TRUE(pool.drain());
  EXPECT_EQ(ran.load(), 1);
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

// Threads for the cores the caller may run on (a job bound to one core of a big node gets none),
// not for every core of the node.
TEST(TaskPool, PerCoreCountsTheCoresThisProcessMayUse)
{
  cpu_set_t all;
  ASSERT_EQ(::sched_getaffinity(0, sizeof all, &all), 0);
  std::vector<int> allowed;
  for (int cpu = 0; cpu < CPU_SETSIZE && allowed.size() < 2; ++cpu) {
    if (CPU_ISSET(cpu, &all)) {
      allowed.push_back(cpu);
    }
  }
  // In a thread of its own: the binding below is that thread's only.
  auto bound_to = [](std::vector<int> cpus) {
    unsigned got = 99;
    std::thread([&] {
      cpu_set_t set;
      CPU_ZERO(&set);
      for (int c : cpus) {
        CPU_SET(c, &set);
      }
      ASSERT_EQ(::sched_setaffinity(0, sizeof set, &set), 0);
      got = TaskPool::per_core(4);
    }).join();
    return got;
  };
  EXPECT_EQ(bound_to({allowed[0]}), 0U) << "one core: the caller does the work";
  if (allowed.size() == 2) {
    EXPECT_EQ(bound_to(allowed), 2U);
    EXPECT_EQ(TaskPool::per_core(1), 1U);
  }
}
