// The daemon's cache keeping (service::CacheKeeper): LRU eviction never takes what a job uses, a
// fill that cannot fit evicts nothing, removals set aside are done later and never swept meanwhile,
// and root's eviction leaves an entry being staged.
#include "stagehand/service/cache_keeper.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace stagehand;
using namespace stagehand::cache;
using namespace stagehand::test;

namespace {

std::string key_of(char c) { return std::string(64, c); }

// A published entry for `c`, last used at `last_used`.
void publish(Store& s, const TempDir& d, char c, std::int64_t last_used)
{
  auto fill = s.begin_fill(key_of(c), 0, 0);
  ASSERT_TRUE(fill) << fill.error().message;
  write_file(d / ("cache/tmp/" + fill->name + "/data"), std::string(100, c));
  EntryMeta meta;
  meta.key = key_of(c);
  meta.source = std::string("/src/") + c;
  meta.kind = stage::SourceKind::file;
  meta.how = stage::Placement::copied;
  ASSERT_TRUE(s.publish(*fill, meta));
  ASSERT_TRUE(s.touch(key_of(c), last_used));
}

// A key of its own for entry `i` (64 hex digits).
std::string hex_key(int i)
{
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016x", i);
  return std::string(48, 'e') + buf;
}

std::set<char> cached(const Store& s)
{
  std::set<char> out;
  for (const auto& e : s.list()) {
    out.insert(e.key[0]);
  }
  return out;
}

struct Fixture
{
  TempDir d;
  std::shared_ptr<Store> store;
  int woken = 0;
  std::set<std::string> jobs_use;  // keys in running jobs' directories, as the registry would say
  std::set<std::string> jobs_view; // of those, keys shown as cache views
  service::CacheKeeper keeper{[this] { ++woken; }, [this](const std::string& k) { return jobs_use.count(k) > 0; },
                              [this](const std::string& k) { return jobs_view.count(k) > 0; }};

  Fixture()
  {
    auto opened = Store::open(d / "cache");
    EXPECT_TRUE(opened) << opened.error().message;
    store = std::make_shared<Store>(std::move(*opened));
    keeper.use_store(store);
  }
  std::uint64_t entry_bytes(char c) const { return store->lookup(key_of(c))->disk_bytes; }
};

std::vector<service::TmpName> debris_names(const std::vector<service::CacheKeeper::Debris>& debris)
{
  std::vector<service::TmpName> out;
  for (const auto& d : debris) {
    out.push_back(d.tmp);
  }
  return out;
}

} // namespace

TEST(CacheKeeper, EvictionNeverTakesAPinnedEntryNorOneARunningJobUses)
{
  STAGEHAND_REQUIRE_ROOT();
  Fixture f;
  publish(*f.store, f.d, 'a', 100); // the oldest: pinned by a staging
  publish(*f.store, f.d, 'b', 200); // in a running job's directory
  publish(*f.store, f.d, 'c', 300);
  publish(*f.store, f.d, 'd', 400);
  ASSERT_TRUE(f.keeper.pin_entry(*f.store, key_of('a')));
  f.jobs_use = {key_of('b')};
  f.keeper.set_limits(CacheLimits{1ULL << 40, 2}); // two entries at most
  f.keeper.evict_to_fit_locked();
  EXPECT_EQ(cached(*f.store), (std::set<char>{'a', 'b'})) << "the least recently used of the others go";
  EXPECT_EQ(f.keeper.evictions(), 2U);
  EXPECT_GT(f.woken, 0) << "the GC thread is told there is something to remove";
  // Past the limits with only what jobs use left: it all stays.
  f.keeper.set_limits(CacheLimits{1ULL << 40, 1});
  f.keeper.evict_to_fit_locked();
  EXPECT_EQ(cached(*f.store), (std::set<char>{'a', 'b'}));
  // Unpinned, the staging's entry is the next to go.
  f.keeper.unpin(key_of('a'));
  EXPECT_FALSE(f.keeper.pinned(key_of('a')));
  f.keeper.evict_to_fit_locked();
  EXPECT_EQ(cached(*f.store), (std::set<char>{'b'}));
}

TEST(CacheKeeper, AFillThatCannotFitEvictsNothing)
{
  STAGEHAND_REQUIRE_ROOT();
  Fixture f;
  publish(*f.store, f.d, 'a', 100);
  publish(*f.store, f.d, 'b', 200);
  publish(*f.store, f.d, 'c', 300);
  ASSERT_TRUE(f.keeper.pin_entry(*f.store, key_of('a')));
  const std::uint64_t pinned_bytes = f.entry_bytes('a');
  const std::uint64_t limit = pinned_bytes + f.entry_bytes('b') + f.entry_bytes('c');
  f.keeper.set_limits(CacheLimits{limit, 100});
  // Even with 'b' and 'c' gone the pinned 'a' leaves no room for this one: refused, nothing evicted.
  EXPECT_FALSE(f.keeper.make_room_locked(f.store, limit - pinned_bytes + 1));
  EXPECT_EQ(cached(*f.store), (std::set<char>{'a', 'b', 'c'}));
  EXPECT_EQ(f.keeper.evictions(), 0U);
  EXPECT_FALSE(f.keeper.removals_waiting());
  // One that fits once the least recently used unpinned entry goes: only that one goes.
  EXPECT_TRUE(f.keeper.make_room_locked(f.store, f.entry_bytes('b')));
  EXPECT_EQ(cached(*f.store), (std::set<char>{'a', 'c'}));
  // A store a reload replaced takes its entry as it is: nothing is evicted for it.
  auto other = Store::open(f.d / "other");
  ASSERT_TRUE(other);
  f.keeper.use_store(std::make_shared<Store>(std::move(*other)));
  EXPECT_TRUE(f.keeper.make_room_locked(f.store, limit));
  EXPECT_EQ(cached(*f.store), (std::set<char>{'a', 'c'}));
}

TEST(CacheKeeper, ARemovalSetAsideIsDoneLaterAndNeverSweptMeanwhile)
{
  STAGEHAND_REQUIRE_ROOT();
  Fixture f;
  publish(*f.store, f.d, 'a', 100);
  publish(*f.store, f.d, 'b', 200);
  f.keeper.set_limits(CacheLimits{1ULL << 40, 1});
  f.keeper.evict_to_fit_locked();
  EXPECT_EQ(cached(*f.store), (std::set<char>{'b'})) << "no job finds the evicted entry any more";
  ASSERT_TRUE(f.keeper.removals_waiting());
  // A fill in progress, and one begun behind the keeper's back (debris for GC).
  auto fill = f.keeper.begin_fill(f.store, key_of('c'), 0, 0);
  ASSERT_TRUE(fill);
  auto stray = f.store->begin_fill(key_of('d'), 0, 0);
  ASSERT_TRUE(stray);
  // GC's sweep takes the stray fill only: the entry set aside and the fill in progress stay.
  auto debris = f.keeper.set_aside_debris(f.store, f.store->scan());
  ASSERT_EQ(debris.size(), 1U);
  EXPECT_EQ(debris[0].tmp.name, stray->name);
  EXPECT_EQ(debris[0].shown, f.store->path() + "/tmp/" + stray->name);
  auto removals = f.keeper.take_removals();
  ASSERT_EQ(removals.size(), 1U);
  EXPECT_FALSE(f.keeper.removals_waiting());
  EXPECT_TRUE(exists_nofollow(f.d / ("cache/tmp/" + removals[0].name))) << "set aside, not removed yet";
  EXPECT_TRUE(exists_nofollow(f.d / ("cache/tmp/" + fill->name)));
  // Removed by remove_now, without any lock held; then its name is free for the next sweep.
  auto failed = f.keeper.remove_now(removals);
  ASSERT_EQ(failed.size(), 1U);
  EXPECT_FALSE(failed[0]);
  EXPECT_FALSE(exists_nofollow(f.d / ("cache/tmp/" + removals[0].name)));
  EXPECT_TRUE(f.keeper.remove_now(debris_names(debris)).at(0) == std::nullopt);
  EXPECT_TRUE(f.keeper.set_aside_debris(f.store, f.store->scan()).empty()) << "the fill in progress stays";
  // A fill that is not published is removed the same way, later.
  f.keeper.remove_later_locked(f.store, *fill);
  EXPECT_TRUE(fill->name.empty());
  EXPECT_TRUE(f.keeper.set_aside_debris(f.store, f.store->scan()).empty());
  f.keeper.remove_now(f.keeper.take_removals());
  EXPECT_TRUE(f.store->scan().tmp.empty());
}

// A `cache evict` of a great many entries on a slow disk (here: a choice that takes 2 ms an
// entry, under the lock) lets the node's lock go between batches: a thread that asks for it gets
// it while the eviction still goes on, and the eviction still takes every entry.
TEST(CacheKeeper, RootsEvictionOfManyEntriesLetsTheNodesLockGoBetweenBatches)
{
  STAGEHAND_REQUIRE_ROOT();
  Fixture f;
  constexpr int n = 500;
  for (int i = 0; i < n; ++i) {
    auto fill = f.store->begin_fill(hex_key(i), 0, 0);
    ASSERT_TRUE(fill) << fill.error().message;
    write_file(f.d / ("cache/tmp/" + fill->name + "/data"), "x");
    EntryMeta meta;
    meta.key = hex_key(i);
    meta.source = "/src/" + std::to_string(i);
    meta.kind = stage::SourceKind::file;
    meta.how = stage::Placement::copied;
    ASSERT_TRUE(f.store->publish(*fill, meta));
  }
  std::mutex daemon_mutex;
  std::atomic<int> looked{0};
  std::atomic<int> looked_when_had{-1};
  std::thread other([&] { // own thread: a test's (another request of the daemon's)
    while (looked < 5) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::lock_guard lock(daemon_mutex);
    looked_when_had = looked.load();
  });
  auto done = f.keeper.evict(
    [&](const EntryMeta&) {
      ++looked;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      return true;
    },
    daemon_mutex);
  other.join();
  EXPECT_GE(looked_when_had.load(), 5);
  EXPECT_LT(looked_when_had.load(), n) << "the lock was had only once the eviction was over";
  EXPECT_EQ(done.evicted.size(), static_cast<std::size_t>(n));
  EXPECT_TRUE(done.errors.empty());
  EXPECT_TRUE(f.store->list().empty());
}

TEST(CacheKeeper, RootsEvictionLeavesAnEntryBeingStaged)
{
  STAGEHAND_REQUIRE_ROOT();
  Fixture f;
  publish(*f.store, f.d, 'a', 100);
  publish(*f.store, f.d, 'b', 200);
  ASSERT_TRUE(f.keeper.pin_entry(*f.store, key_of('a')));
  std::mutex daemon_mutex;
  auto done = f.keeper.evict([](const EntryMeta&) { return true; }, daemon_mutex);
  EXPECT_FALSE(done.cache_off);
  EXPECT_EQ(done.evicted, (std::vector<std::string>{"/src/b"}));
  ASSERT_EQ(done.errors.size(), 1U);
  EXPECT_EQ(done.errors[0], "/src/a: being staged right now, not evicted");
  EXPECT_EQ(cached(*f.store), (std::set<char>{'a'}));
  // An entry a running job's cache view shows (its files are the view's lower layer) stays too;
  // one a running job has links of goes (the links outlive it).
  f.keeper.unpin(key_of('a'));
  publish(*f.store, f.d, 'c', 100);
  f.jobs_use = {key_of('a'), key_of('c')};
  f.jobs_view = {key_of('a')};
  auto viewed = f.keeper.evict([](const EntryMeta&) { return true; }, daemon_mutex);
  EXPECT_EQ(viewed.evicted, (std::vector<std::string>{"/src/c"}));
  ASSERT_EQ(viewed.errors.size(), 1U);
  EXPECT_EQ(viewed.errors[0], "/src/a: shown as a cache view in a running job on this node, not evicted (evict it "
                              "again once the job has ended)");
  EXPECT_EQ(cached(*f.store), (std::set<char>{'a'}));
  EXPECT_TRUE(f.store->scan().tmp.empty()) << "removed before the answer";
  EXPECT_EQ(f.keeper.evictions(), 2U); // b and c
  EXPECT_TRUE(daemon_mutex.try_lock()) << "the daemon's lock is released";
  daemon_mutex.unlock();
  f.keeper.use_store(nullptr);
  EXPECT_TRUE(f.keeper.evict([](const EntryMeta&) { return true; }, daemon_mutex).cache_off);
}
