// The node cache's decisions for one source of a staging request (cache/stage_plan), as tables.
#include "stagehand/cache/stage_plan.hpp"

#include <gtest/gtest.h>

using namespace stagehand;
using namespace stagehand::cache;
using namespace std::chrono_literals;

namespace {

using stage::SourceKind;

struct SourceRow
{
  bool cached;
  bool read_under_way;
  int attempt;
  bool report_misses;
  SourceKind kind;
  bool delivered_copy;
  SourceStep want;
};

const char* name(SourceStep s)
{
  switch (s) {
  case SourceStep::hit:
    return "hit";
  case SourceStep::wait_for_read:
    return "wait_for_read";
  case SourceStep::report_absent:
    return "report_absent";
  case SourceStep::read:
    return "read";
  }
  return "?";
}

} // namespace

TEST(StagePlan, HitWaitReportOrRead)
{
  constexpr auto F = SourceKind::file;
  constexpr auto D = SourceKind::dir;
  const SourceRow rows[] = {
    // An entry wins over everything: no read, no wait.
    {true, false, 0, false, F, false, SourceStep::hit},
    {true, true, 0, true, F, false, SourceStep::hit},
    {true, true, 5, true, D, true, SourceStep::hit},
    // Another job reads it: wait (single flight), up to 3 times.
    {false, true, 0, false, F, false, SourceStep::wait_for_read},
    {false, true, 2, true, F, false, SourceStep::wait_for_read},
    {false, true, 0, false, D, false, SourceStep::wait_for_read},
    // ... then read it, unless misses are reported.
    {false, true, 3, false, F, false, SourceStep::read},
    {false, true, 3, true, F, false, SourceStep::report_absent},
    // Nobody reads it: read it; a file the job would rather broadcast is reported unread.
    {false, false, 0, false, F, false, SourceStep::read},
    {false, false, 0, true, F, false, SourceStep::report_absent},
    // ... not a directory (never broadcast), not a file whose broadcast copy is here (read that).
    {false, false, 0, true, D, false, SourceStep::read},
    {false, false, 0, true, F, true, SourceStep::read},
  };
  for (const auto& r : rows) {
    SourceSituation s{r.cached, r.read_under_way, r.attempt, r.report_misses, r.kind, r.delivered_copy};
    EXPECT_EQ(next_source_step(s), r.want)
      << "cached " << r.cached << " under way " << r.read_under_way << " attempt " << r.attempt << " report "
      << r.report_misses << " dir " << (r.kind == D) << " copy " << r.delivered_copy << ": " << name(next_source_step(s));
  }
}

TEST(StagePlan, AWaitingJobWaitsForTheReadThenTheEntryThenUsesTheSpool)
{
  const auto t0 = Clock::now();
  const auto stall = 600s;
  ReadProgress r;
  r.progressed = t0;
  EXPECT_EQ(next_wait_step(r, t0 + 1s, stall), WaitStep::wait_for_read);
  EXPECT_EQ(next_wait_step(r, t0 + 600s, stall), WaitStep::wait_for_read);
  EXPECT_EQ(next_wait_step(r, t0 + 601s, stall), WaitStep::stalled);
  r.progressed = t0 + 590s; // it moved: not stalled
  EXPECT_EQ(next_wait_step(r, t0 + 601s, stall), WaitStep::wait_for_read);
  // The spool is whole: the entry about as long as the read took, then the spool.
  r.spool_ready = true;
  r.patience_until = entry_patience(t0 + 10s, 4000ms);
  EXPECT_EQ(r.patience_until, t0 + 15s);
  EXPECT_EQ(next_wait_step(r, t0 + 14s, stall), WaitStep::wait_for_entry);
  EXPECT_EQ(next_wait_step(r, t0 + 15s, stall), WaitStep::deliver_from_spool);
  EXPECT_EQ(next_wait_step(r, t0 + 2000s, stall), WaitStep::deliver_from_spool); // no stall once the spool is whole
  // The read ended (published or failed): look again, whatever else it says.
  r.done = true;
  EXPECT_EQ(next_wait_step(r, t0 + 14s, stall), WaitStep::look_again);
  EXPECT_EQ(next_wait_step(r, t0 + 2000s, stall), WaitStep::look_again);
}

TEST(StagePlan, WhatAMissMayCache)
{
  struct timespec started {};
  ::clock_gettime(CLOCK_REALTIME, &started);
  const std::int64_t now_ns = static_cast<std::int64_t>(started.tv_sec) * 1000000000 + started.tv_nsec;
  SourceIdentity old{"k", 1, 100, now_ns - 60'000'000'000}; // changed a minute before
  SourceIdentity fresh{"k", 1, 100, now_ns - 1'000'000'000}; // a second before: inside the racy window
  EXPECT_EQ(uncached_before_read(old, started, 1000), "");
  EXPECT_EQ(uncached_before_read(fresh, started, 1000), "source modified during or just before staging");
  EXPECT_EQ(uncached_before_read(old, started, 99), "larger than the node cache");
  EXPECT_EQ(uncached_before_read(old, started, 100), "");
  EXPECT_EQ(uncached_after_read(false, ""), "");
  EXPECT_EQ(uncached_after_read(true, ""), "source modified during or just before staging");
  EXPECT_EQ(uncached_after_read(true, "the cache could not keep up"), "source modified during or just before staging");
  EXPECT_EQ(uncached_after_read(false, "the cache could not keep up"), "not cached: the cache could not keep up");
  EXPECT_TRUE(fill_follows_spool(false, false));  // an archive, a directory's tar stream
  EXPECT_FALSE(fill_follows_spool(false, true));  // a zip: read whole first
  EXPECT_FALSE(fill_follows_spool(true, false));  // a plain file: its spool is its entry
}

TEST(StagePlan, ALoneFillStartsWhenTheCpusHaveRoomOrAJobWaitsOrItHasWaitedLongEnough)
{
  using namespace std::chrono_literals;
  const auto at = [](double idle, unsigned cpus, Clock::duration held = 0s, bool waits = false) {
    return lone_fill_start({idle, cpus, held, waits});
  };
  // Two cores: a step winding down on one holds the fill; both all but idle start it.
  EXPECT_EQ(at(1.0, 2), FillStart::hold);
  EXPECT_EQ(at(1.7, 2), FillStart::hold);
  EXPECT_EQ(at(1.8, 2), FillStart::now);
  // A big node with a job on most of its cores still has room for it.
  EXPECT_EQ(at(8.0, 128), FillStart::now);
  EXPECT_EQ(at(1.5, 128), FillStart::hold);
  // One core: idle is room enough.
  EXPECT_EQ(at(0.8, 1), FillStart::now);
  EXPECT_EQ(at(0.5, 1), FillStart::hold);
  // A job waiting for the entry, or the longest hold, starts it on a busy node.
  EXPECT_EQ(at(0.0, 2, 0s, true), FillStart::now);
  EXPECT_EQ(at(0.0, 2, k_fill_hold_max - 1ms), FillStart::hold);
  EXPECT_EQ(at(0.0, 2, k_fill_hold_max), FillStart::now);
  // Nothing known of the CPUs: only the hold's end starts it.
  EXPECT_EQ(at(4.0, 0), FillStart::hold);
}

TEST(StagePlan, ADirectoryOfLargeFilesIsCopiedByItsReaderOneOfSmallFilesUnpackedBesideIt)
{
  auto how = [](std::uint64_t files, std::uint64_t bytes) { return tree_delivery(SourceIdentity{"k", files, bytes, 0}); };
  EXPECT_EQ(how(16, 16ULL << 26), TreeDelivery::reader_copies);           // 16 x 64 MiB shards
  EXPECT_EQ(how(60000, 60000ULL * 2048), TreeDelivery::unpacked_from_stream); // 60,000 x 2 KiB
  EXPECT_EQ(how(4, 4 * k_reader_copies_from), TreeDelivery::reader_copies);
  EXPECT_EQ(how(4, 4 * k_reader_copies_from - 1), TreeDelivery::unpacked_from_stream);
  EXPECT_EQ(how(0, 0), TreeDelivery::unpacked_from_stream); // an empty tree
}
