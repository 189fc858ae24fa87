// The cache's in-memory index: totals kept as entries come and go, and the eviction choice (least
// recently used first, never what a running job uses, bounded by bytes and by number of entries).
#include "stagehand/cache/index.hpp"

#include <gtest/gtest.h>

#include <set>

using namespace stagehand::cache;

namespace {

EntryMeta entry(const std::string& key, std::uint64_t disk_bytes, std::int64_t last_used)
{
  EntryMeta m;
  m.key = key;
  m.source = "/src/" + key;
  m.disk_bytes = disk_bytes;
  m.last_used = last_used;
  return m;
}

std::vector<std::string> keys_of(const std::vector<EntryMeta>& v)
{
  std::vector<std::string> out;
  for (const auto& e : v) {
    out.push_back(e.key);
  }
  return out;
}

const auto k_nothing_pinned = [](const std::string&) { return false; };

} // namespace

TEST(CacheIndex, TotalsFollowPutTouchAndErase)
{
  Index i;
  i.put(entry("a", 100, 1));
  i.put(entry("b", 50, 2));
  i.put(entry("a", 10, 3)); // replaced, not added
  EXPECT_EQ(i.totals().entries, 2U);
  EXPECT_EQ(i.totals().bytes, 60U);
  i.touch("b", 9);
  EXPECT_EQ(i.find("b")->last_used, 9);
  i.erase("a");
  i.erase("missing");
  EXPECT_EQ(i.totals().entries, 1U);
  EXPECT_EQ(i.totals().bytes, 50U);
  EXPECT_FALSE(i.find("a"));
}

TEST(CacheIndex, MakesRoomLeastRecentlyUsedFirstAndNeverEvictsWhatJobsUse)
{
  Index i;
  i.put(entry("old", 40, 1));
  i.put(entry("pinned", 40, 2));
  i.put(entry("mid", 40, 3));
  i.put(entry("new", 40, 4));
  const auto pinned = [](const std::string& k) { return k == "pinned"; };
  // Within its limits: nothing to evict, and the cost is nothing.
  auto room = i.make_room(Index::Incoming::one, 40, CacheLimits{200, 10}, pinned);
  EXPECT_TRUE(room.fits);
  EXPECT_TRUE(room.victims.empty());
  // 160 + 100 > 200: the oldest unpinned go, the pinned one is skipped.
  room = i.make_room(Index::Incoming::one, 100, CacheLimits{200, 10}, pinned);
  EXPECT_TRUE(room.fits);
  EXPECT_EQ(keys_of(room.victims), (std::vector<std::string>{"old", "mid"}));
  // By number of entries: a fifth entry under a cap of 4 evicts one.
  room = i.make_room(Index::Incoming::one, 1, CacheLimits{1000, 4}, pinned);
  EXPECT_TRUE(room.fits);
  EXPECT_EQ(keys_of(room.victims), (std::vector<std::string>{"old"}));
  // GC (no newcomer) brings a cache over its entry cap back to it.
  room = i.make_room(Index::Incoming::none, 0, CacheLimits{1000, 2}, pinned);
  EXPECT_TRUE(room.fits);
  EXPECT_EQ(keys_of(room.victims), (std::vector<std::string>{"old", "mid"}));
  // Touched, "old" is the most recently used now.
  i.touch("old", 10);
  room = i.make_room(Index::Incoming::none, 0, CacheLimits{1000, 3}, pinned);
  EXPECT_EQ(keys_of(room.victims), (std::vector<std::string>{"mid"}));
}

TEST(CacheIndex, AFillThatOnlyFitsByEvictingPinnedEntriesDoesNotFit)
{
  Index i;
  i.put(entry("a", 100, 1));
  i.put(entry("b", 100, 2));
  const auto all_pinned = [](const std::string&) { return true; };
  auto room = i.make_room(Index::Incoming::one, 50, CacheLimits{220, 10}, all_pinned);
  EXPECT_FALSE(room.fits) << "one job's pinned entries would push the cache past its size";
  EXPECT_TRUE(room.victims.empty());
  room = i.make_room(Index::Incoming::one, 1, CacheLimits{1000, 2}, all_pinned);
  EXPECT_FALSE(room.fits) << "nor past its number of entries";
  // Some unpinned: all of them are the victims GC takes, and a publish is still refused.
  const auto a_pinned = [](const std::string& k) { return k == "a"; };
  room = i.make_room(Index::Incoming::one, 150, CacheLimits{200, 10}, a_pinned);
  EXPECT_FALSE(room.fits);
  EXPECT_EQ(keys_of(room.victims), (std::vector<std::string>{"b"}));
  // Larger than the cache itself: never fits, nothing evicted for it.
  room = i.make_room(Index::Incoming::one, 5000, CacheLimits{1000, 10}, k_nothing_pinned);
  EXPECT_FALSE(room.fits);
  EXPECT_TRUE(room.victims.empty());
}
