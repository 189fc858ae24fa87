// The node lock's watch (service/lock_watch): how long the probe has waited for the lock while a
// thread holds it, the requests turned away meanwhile, and the probe's end with the lock held.
#include "stagehand/service/lock_watch.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

using namespace stagehand;
using namespace std::chrono_literals;
using service::LockWatch;

namespace {

// Polls `done` until it holds or 10 s have passed (a loaded machine may be slow to schedule).
template <typename F> bool within_10s(F done)
{
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) {
      return false;
    }
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

} // namespace

TEST(LockWatch, OutOfReachCountsTheProbesWaitWhileAHolderKeepsTheLockAndEndsWhenItIsHad)
{
  std::mutex node;
  LockWatch watch(node, 10ms);
  watch.start({});
  {
    std::lock_guard held(node); // a request stuck in the kernel with it
    ASSERT_TRUE(within_10s([&] { return watch.out_of_reach() >= 1ms; })); // the probe waits for it now
    std::this_thread::sleep_for(300ms);
    EXPECT_GE(watch.out_of_reach(), 300ms); // and cannot have had it since
  }
  EXPECT_TRUE(within_10s([&] { return watch.out_of_reach() == 0ms; }));
  EXPECT_TRUE(watch.stop(10s));
}

TEST(LockWatch, RequestsTurnedAwayAreReportedOnceTheLockIsHadAgain)
{
  std::mutex node;
  std::mutex m;
  std::condition_variable cv;
  std::chrono::milliseconds reported_wait{0};
  std::uint64_t reported = 0;
  int reports = 0;
  LockWatch watch(node, 10ms); // (after what its report uses: it stops first)
  watch.start([&](std::chrono::milliseconds out_of_reach, std::uint64_t turned) {
    std::lock_guard lock(m);
    reported_wait = out_of_reach;
    reported = turned;
    ++reports;
    cv.notify_all();
  });
  {
    std::lock_guard held(node);
    ASSERT_TRUE(within_10s([&] { return watch.out_of_reach() >= 1ms; }));
    std::this_thread::sleep_for(300ms);
    EXPECT_TRUE(watch.turn_away()); // the first: the daemon logs its warning
    EXPECT_FALSE(watch.turn_away());
    EXPECT_FALSE(watch.turn_away());
  }
  std::unique_lock lock(m);
  ASSERT_TRUE(cv.wait_for(lock, 10s, [&] { return reports > 0; }));
  EXPECT_EQ(reports, 1);
  EXPECT_EQ(reported, 3u);
  EXPECT_GE(reported_wait, 300ms);
  lock.unlock();
  EXPECT_TRUE(watch.turn_away()); // a new episode begins with a new warning
  EXPECT_TRUE(watch.stop(10s));
}

TEST(LockWatch, NoReportWithoutARequestTurnedAway)
{
  std::mutex node;
  std::mutex m;
  int reports = 0;
  LockWatch watch(node, 10ms);
  watch.start([&](std::chrono::milliseconds, std::uint64_t) {
    std::lock_guard lock(m);
    ++reports;
  });
  {
    std::lock_guard held(node);
    ASSERT_TRUE(within_10s([&] { return watch.out_of_reach() >= 1ms; }));
  }
  ASSERT_TRUE(within_10s([&] { return watch.out_of_reach() == 0ms; }));
  EXPECT_TRUE(watch.stop(10s));
  std::lock_guard lock(m);
  EXPECT_EQ(reports, 0);
}

TEST(LockWatch, StopGivesUpOnAProbeThatWaitsOnTheLockForGoodAndTheProbeEndsOnceItHasIt)
{
  static std::mutex node; // outlives the probe, as stagehandd's does (it leaves with _exit)
  static std::atomic<int> reports{0};
  reports = 0;
  std::unique_lock held(node);
  {
    LockWatch watch(node, 10ms);
    watch.start([](std::chrono::milliseconds, std::uint64_t) { ++reports; });
    ASSERT_TRUE(within_10s([&] { return watch.out_of_reach() >= 1ms; })); // it waits on the lock now
    EXPECT_TRUE(watch.turn_away());
    EXPECT_FALSE(watch.stop(100ms)); // (a stop that waited for the lock would never return: it is held here)
    EXPECT_FALSE(watch.stop(100ms)); // and it stays given up: the lock's owner must not be destroyed
  } // its state stays with the probe
  held.unlock();
  EXPECT_TRUE(within_10s([] { return reports.load() == 1; })); // it had the lock, reported, and ended
}
