// The daemon's job registry keeper (service::RegistryKeeper): a change is written by its saver
// thread no sooner than a second after the last write and soon after that, a change saved now is
// on disk when change() returns, a write never puts an older copy over a newer one, and what one
// keeper wrote is what the next one (the daemon after a restart) loads.
#include "stagehand/service/registry_keeper.hpp"

#include "stagehand/registry/registry.hpp"

#include "test_support.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <thread>

#include <gtest/gtest.h>

using namespace stagehand;
using namespace stagehand::test;
using service::RegistryKeeper;

namespace {

using Clock = std::chrono::steady_clock;

struct StateDir
{
  TempDir dir;
  UniqueFd fd{::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};

  // The registry as the next daemon would load it.
  registry::Registry on_disk() const
  {
    auto loaded = registry::load(fd.get());
    EXPECT_TRUE(loaded) << loaded.error().message;
    return loaded ? *loaded : registry::Registry{};
  }
  bool has_job(std::uint32_t job_id) const { return on_disk().find(job_id) != nullptr; }
};

registry::JobRecord job(std::uint32_t id, std::uint32_t uid = 1001)
{
  registry::JobRecord rec;
  rec.job_id = id;
  rec.uid = uid;
  rec.gid = uid;
  rec.registered_at = 1700000000 + id;
  return rec;
}

// A change that registers `rec`.
auto registering(const registry::JobRecord& rec)
{
  return [rec](registry::Registry& reg) {
    reg.register_job(rec);
    return RegistryKeeper::Changed::yes;
  };
}

} // namespace

TEST(RegistryKeeper, AChangeIsWrittenNoSoonerThanASecondAfterTheLastWriteAndSoonAfter)
{
  StateDir state;
  RegistryKeeper keeper;
  keeper.open(state.fd.get());
  keeper.start_saving();
  const auto before_save = Clock::now();
  keeper.save_now();
  keeper.change(registering(job(7)), RegistryKeeper::Save::soon);
  const auto changed_at = Clock::now();
  const bool written_at_once = state.has_job(7);
  if (Clock::now() - before_save < RegistryKeeper::k_save_every) {
    EXPECT_FALSE(written_at_once) << "written sooner than a second after the last write";
  }
  while (!state.has_job(7) && Clock::now() - changed_at < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const auto seen_at = Clock::now();
  ASSERT_TRUE(state.has_job(7)) << "a change is written by the saver thread";
  EXPECT_GE(seen_at - before_save, RegistryKeeper::k_save_every);
  EXPECT_LE(seen_at - changed_at, RegistryKeeper::k_save_every + std::chrono::seconds(3));
}

TEST(RegistryKeeper, AChangeSavedNowIsOnDiskWhenItReturnsOneSavedSoonWaitsForTheSaver)
{
  StateDir state;
  RegistryKeeper keeper; // no saver thread: only what is saved now reaches the disk
  keeper.open(state.fd.get());
  keeper.change(registering(job(8)), RegistryKeeper::Save::now); // a job's start: before the prolog hears back
  EXPECT_TRUE(state.has_job(8));
  keeper.add_cache_key(8, "k1"); // soon: for the saver thread, which does not run here
  EXPECT_TRUE(keeper.key_in_use("k1"));
  ASSERT_NE(state.on_disk().find(8), nullptr);
  EXPECT_TRUE(state.on_disk().find(8)->cache_keys.empty());
  keeper.save_now(); // at shutdown
  EXPECT_EQ(state.on_disk().find(8)->cache_keys, std::set<std::string>{"k1"});
}

TEST(RegistryKeeper, AWriteNeverPutsAnOlderCopyOverANewerOne)
{
  StateDir state;
  RegistryKeeper keeper;
  keeper.open(state.fd.get());
  keeper.change(registering(job(1)), RegistryKeeper::Save::soon);
  auto older = keeper.copy();
  keeper.change(registering(job(2)), RegistryKeeper::Save::soon);
  auto newer = keeper.copy();
  EXPECT_LT(older.generation, newer.generation);
  keeper.write(newer);
  keeper.write(older); // its writer was slower: skipped
  EXPECT_TRUE(state.has_job(1));
  EXPECT_TRUE(state.has_job(2)) << "the older copy was written last";
}

// A registry that could not be written (a full state disk; here a directory in its place, which
// the atomic rename cannot replace) is written by the saver once it can be, with no further change:
// a job's start saved "now" is not lost to a daemon restart after the disk recovers.
TEST(RegistryKeeper, AWriteThatFailedIsTriedAgainUntilItIsWritten)
{
  StateDir state;
  RegistryKeeper keeper(std::chrono::milliseconds(50));
  keeper.open(state.fd.get());
  keeper.start_saving();
  ASSERT_EQ(::mkdirat(state.fd.get(), registry::k_registry_file, 0700), 0);
  keeper.change(registering(job(11)), RegistryKeeper::Save::now); // fails: the job is in memory only
  struct stat st {};
  ASSERT_EQ(::fstatat(state.fd.get(), registry::k_registry_file, &st, 0), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  std::this_thread::sleep_for(std::chrono::milliseconds(200)); // a few failed tries
  ASSERT_EQ(::unlinkat(state.fd.get(), registry::k_registry_file, AT_REMOVEDIR), 0); // the disk recovers
  const auto recovered_at = Clock::now();
  while (!state.has_job(11) && Clock::now() - recovered_at < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(state.has_job(11)) << "the failed write was never tried again";
}

TEST(RegistryKeeper, WhatOneKeeperWroteTheNextLoads)
{
  StateDir state;
  std::string written;
  {
    RegistryKeeper keeper;
    keeper.open(state.fd.get());
    keeper.start_saving();
    keeper.change(
      [](registry::Registry& reg) {
        reg.register_job(job(10, 1001));
        reg.register_job(job(11, 1002));
        reg.register_job(job(12, 1003));
        reg.add_cache_key(10, "a");
        reg.add_cache_key(11, "b");
        EXPECT_TRUE(reg.charge(10, 4096, 1U << 20));
        reg.end_job(11, 1700000200, 1700000900);
        reg.end_job(12, 1700000300, 0);
        return RegistryKeeper::Changed::yes;
      },
      RegistryKeeper::Save::soon);
    keeper.stop_saving();
    keeper.save_now(); // as the daemon stops
    written = keeper.read([](const registry::Registry& reg) { return reg.to_json(); });
  }
  RegistryKeeper next;
  next.open(state.fd.get());
  EXPECT_EQ(next.read([](const registry::Registry& reg) { return reg.to_json(); }), written);
  ASSERT_TRUE(next.find(10));
  EXPECT_EQ(next.find(10)->staged_bytes, 4096U);
  EXPECT_EQ(next.find(11)->keep_until, 1700000900);
  EXPECT_TRUE(next.key_in_use("a"));
  EXPECT_FALSE(next.key_in_use("b")) << "an ended job pins nothing";
  EXPECT_FALSE(next.find(13));
}

TEST(RegistryKeeper, AnUnreadableRegistryIsReplacedByAnEmptyOne)
{
  StateDir state;
  write_file(state.dir / registry::k_registry_file, "{ not json");
  RegistryKeeper keeper;
  keeper.open(state.fd.get());
  EXPECT_EQ(keeper.read([](const registry::Registry& reg) { return reg.jobs().size(); }), 0U);
  keeper.change(registering(job(3)), RegistryKeeper::Save::now);
  EXPECT_TRUE(state.has_job(3)) << "and the next write replaces it";
}
