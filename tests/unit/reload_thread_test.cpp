// stagehandd's reloads on a thread of their own: the caller (the server's loop) never waits for one.
#include "stagehand/service/reload_thread.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

using namespace stagehand::service;
using namespace std::chrono_literals;

namespace {

// A reload that waits until released (as one stuck on a filesystem or a name service would).
struct Gate
{
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  std::atomic<int> entered{0};
  std::atomic<int> done{0};
  void pass()
  {
    ++entered;
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return open; });
    ++done;
  }
  void release()
  {
    std::lock_guard lock(m);
    open = true;
    cv.notify_all();
  }
};

bool eventually(const std::function<bool()>& cond)
{
  for (int i = 0; i < 2000; ++i) {
    if (cond()) {
      return true;
    }
    std::this_thread::sleep_for(5ms);
  }
  return cond();
}

} // namespace

TEST(ReloadThread, AskReturnsWhileTheReloadWaitsAndAsksMadeMeanwhileCoalesce)
{
  Gate gate;
  ReloadThread reloads([&] { gate.pass(); });
  reloads.ask(); // returns at once though the reload waits
  ASSERT_TRUE(eventually([&] { return gate.entered == 1; }));
  EXPECT_TRUE(reloads.busy());
  reloads.ask();
  reloads.ask();
  reloads.ask(); // three asks while one runs: one more reload, not three
  gate.release();
  ASSERT_TRUE(eventually([&] { return gate.done == 2 && !reloads.busy(); }));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(gate.entered, 2);
  EXPECT_TRUE(reloads.stop());
}

TEST(ReloadThread, StopJoinsAnIdleThreadAndLeavesAStuckReloadBehind)
{
  {
    int runs = 0;
    ReloadThread idle([&] { ++runs; });
    idle.ask();
    ASSERT_TRUE(eventually([&] { return !idle.busy(); }));
    EXPECT_EQ(runs, 1);
    EXPECT_TRUE(idle.stop());
    idle.ask(); // stopped: no reload any more
    EXPECT_FALSE(idle.busy());
    EXPECT_EQ(runs, 1);
  }
  auto gate = std::make_shared<Gate>();
  {
    ReloadThread stuck([gate] { gate->pass(); });
    stuck.ask();
    ASSERT_TRUE(eventually([&] { return gate->entered == 1; }));
    EXPECT_FALSE(stuck.stop()); // a reload under way: not waited for
  } // and destroyed, its thread still in the reload
  gate->release(); // the left thread ends on its own, touching nothing destroyed
  ASSERT_TRUE(eventually([&] { return gate->done == 1; }));
  std::this_thread::sleep_for(50ms);
}
