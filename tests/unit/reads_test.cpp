// The table of reads under way (single flight): one read per key, a job starting together with
// others claims a source once, and a waiter wakes when a read begins.
#include "stagehand/service/reads.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>

using namespace stagehand;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

TEST(ReadsUnderWay, AReadIsFoundUntilItEnds)
{
  service::ReadsUnderWay reads;
  EXPECT_EQ(reads.find("k"), nullptr);
  auto w = reads.begin("k", "k", Clock::now());
  EXPECT_EQ(reads.find("k"), w);
  EXPECT_EQ(reads.find_any({"other", "k"}), w);
  EXPECT_EQ(reads.find("other"), nullptr);
  reads.end("k", w);
  EXPECT_EQ(reads.find("k"), nullptr);
}

TEST(ReadsUnderWay, AnOldReadEndingLeavesTheNewOne)
{
  // A fill thread ends a read after its job moved on; a later read of the key must stay found.
  service::ReadsUnderWay reads;
  auto first = reads.begin("k", "k", Clock::now());
  auto second = reads.begin("k", "k", Clock::now());
  reads.end("k", first);
  EXPECT_EQ(reads.find("k"), second);
}

TEST(ReadsUnderWay, JobsStartingTogetherClaimASourceOnce)
{
  service::ReadsUnderWay reads;
  const auto t0 = Clock::now();
  EXPECT_TRUE(reads.claim("k", t0, 10s));
  EXPECT_FALSE(reads.claim("k", t0 + 1s, 10s));
  EXPECT_TRUE(reads.claim("other", t0 + 1s, 10s));
  // A claim whose job never read (it died at task start) stands no longer than its time.
  EXPECT_TRUE(reads.claim("k", t0 + 11s, 10s));
}

TEST(ReadsUnderWay, ABegunReadSettlesItsClaim)
{
  service::ReadsUnderWay reads;
  const auto t0 = Clock::now();
  ASSERT_TRUE(reads.claim("source", t0, 10s));
  reads.begin("delivered-key", "source", t0);
  EXPECT_TRUE(reads.claim("source", t0 + 1s, 10s));
}

TEST(ReadsUnderWay, AWaiterWakesWhenTheReadBegins)
{
  service::ReadsUnderWay reads;
  std::mutex mutex;
  std::shared_ptr<service::FillWait> begun;
  std::thread reader([&] {
    std::this_thread::sleep_for(50ms);
    std::lock_guard lock(mutex);
    begun = reads.begin("mine", "source", Clock::now());
  });
  std::unique_lock lock(mutex);
  auto got = reads.await_begin(lock, {"source", "mine"}, Clock::now() + 30s);
  lock.unlock();
  reader.join();
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got, begun);
}

TEST(ReadsUnderWay, AWaiterGivesUpWhenNoReadBegins)
{
  service::ReadsUnderWay reads;
  std::mutex mutex;
  std::unique_lock lock(mutex);
  EXPECT_EQ(reads.await_begin(lock, {"k"}, Clock::now() + 20ms), nullptr);
  EXPECT_EQ(reads.await_begin(lock, {"k"}, Clock::now() - 1s), nullptr); // a time already past: no wait
}
