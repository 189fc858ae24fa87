// stagehandd's reloads on a thread of their own: the caller (the server's loop) never waits for one.
#include "stagehand/service/reload_thread.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

using namespace stagehand::service;
using stagehand::test::wait_until;
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

// Opens the gate however the test ends (a failed assertion leaves no thread waiting on it).
struct Opens
{
  std::shared_ptr<Gate> gate;
  ~Opens() { gate->release(); }
};

// `call` returns within 5 s (a reload run in the caller, or a stop that waits for one, would not:
// then the gate is opened, to let it end, and the answer is no).
template<typename F> bool returns_soon(Gate& gate, F call)
{
  auto f = std::async(std::launch::async, call);
  if (f.wait_for(5s) != std::future_status::ready) {
    gate.release();
    f.wait();
    return false;
  }
  return true;
}

} // namespace

TEST(ReloadThread, AskReturnsWhileTheReloadWaitsAndAsksMadeMeanwhileCoalesce)
{
  auto gate = std::make_shared<Gate>();
  ReloadThread reloads([gate] { gate->pass(); });
  Opens opens{gate};
  EXPECT_TRUE(returns_soon(*gate, [&] { reloads.ask(); })); // though the reload waits
  ASSERT_TRUE(wait_until([&] { return gate->entered == 1; }, 10s));
  EXPECT_TRUE(reloads.busy());
  EXPECT_TRUE(returns_soon(*gate, [&] {
    reloads.ask();
    reloads.ask();
    reloads.ask(); // three asks while one runs: one more reload, not three
  }));
  gate->release();
  ASSERT_TRUE(wait_until([&] { return gate->done == 2 && !reloads.busy(); }, 10s));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(gate->entered, 2);
  EXPECT_TRUE(reloads.stop());
}

TEST(ReloadThread, StopJoinsAnIdleThreadAndLeavesAStuckReloadBehind)
{
  {
    int runs = 0;
    ReloadThread idle([&] { ++runs; });
    idle.ask();
    ASSERT_TRUE(wait_until([&] { return !idle.busy(); }, 10s));
    EXPECT_EQ(runs, 1);
    EXPECT_TRUE(idle.stop());
    idle.ask(); // stopped: no reload any more
    EXPECT_FALSE(idle.busy());
    EXPECT_EQ(runs, 1);
  }
  auto gate = std::make_shared<Gate>();
  Opens opens{gate};
  auto sentinel = std::make_shared<int>(0); // held by the reload's function, so by the thread's state
  std::weak_ptr<int> held = sentinel;
  {
    ReloadThread stuck([gate, sentinel] { gate->pass(); });
    sentinel.reset();
    stuck.ask();
    ASSERT_TRUE(wait_until([&] { return gate->entered == 1; }, 10s));
    stuck.ask(); // asked while stuck: dropped by the stop below, never run
    bool stopped = true;
    EXPECT_TRUE(returns_soon(*gate, [&] { stopped = stuck.stop(); })); // a reload under way: not waited for
    EXPECT_FALSE(stopped);
  } // and destroyed, its thread still in the reload
  EXPECT_FALSE(held.expired()); // the left thread still holds what it runs
  gate->release();
  // It ends on its own, runs nothing more, and frees its state (ASan checks it touches nothing freed).
  ASSERT_TRUE(wait_until([&] { return held.expired(); }, 10s));
  EXPECT_EQ(gate->entered, 1);
}

TEST(ReloadThread, CloseDropsAReloadAskedAndNotBegun)
{
  auto gate = std::make_shared<Gate>();
  Opens opens{gate};
  ReloadThread reloads([gate] { gate->pass(); });
  reloads.ask();
  ASSERT_TRUE(wait_until([&] { return gate->entered == 1; }, 10s));
  reloads.ask(); // would follow the one under way
  reloads.close();
  gate->release();
  ASSERT_TRUE(wait_until([&] { return !reloads.busy(); }, 10s));
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(gate->entered, 1);
  EXPECT_TRUE(reloads.stop());
}
