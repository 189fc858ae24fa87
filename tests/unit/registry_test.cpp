// The daemon's job registry: operations, JSON form, atomic persistence.
#include "stagehand/registry/registry.hpp"
#include "stagehand/util/fd.hpp"

#include "test_support.hpp"

#include <fcntl.h>

#include <algorithm>

#include <gtest/gtest.h>

using namespace stagehand;
using namespace stagehand::registry;
using namespace stagehand::test;

namespace {

JobRecord job(std::uint32_t id, std::uint32_t uid, std::uint32_t gid)
{
  JobRecord r;
  r.job_id = id;
  r.uid = uid;
  r.gid = gid;
  return r;
}

} // namespace

TEST(Registry, RunningJobsHoldTheirCacheEntries)
{
  Registry r;
  r.register_job(job(7, 1001, 1001));
  r.register_job(job(8, 1002, 1002));
  r.add_cache_key(7, "k1");
  r.add_cache_key(7, "k1"); // once
  r.add_cache_key(8, "k2");
  EXPECT_EQ(r.find(7)->cache_keys.size(), 1U);
  EXPECT_TRUE(r.key_in_use("k1"));
  r.end_job(7, 100, 0);
  EXPECT_FALSE(r.key_in_use("k1"));
  EXPECT_TRUE(r.key_in_use("k2"));
  EXPECT_EQ(r.find(7)->state, JobState::ended);
  // A requeued job registers again: running, with a fresh record.
  r.register_job(job(7, 1001, 1001));
  EXPECT_EQ(r.find(7)->state, JobState::running);
  r.forget(8);
  EXPECT_EQ(r.find(8), nullptr);
}

TEST(Registry, SurvivesARestartAndRefusesGarbage)
{
  TempDir dir;
  UniqueFd fd(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY));
  auto empty = load(fd.get());
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->jobs().empty());
  Registry r;
  r.register_job(job(9, 1001, 1003));
  r.add_cache_key(9, "kk");
  r.end_job(9, 50, 60);
  auto lone = job(10, 1001, 1003);
  lone.staging = stage::StagingAsked::no;
  r.register_job(lone);
  ASSERT_TRUE(save(fd.get(), r));
  auto back = load(fd.get());
  ASSERT_TRUE(back);
  ASSERT_NE(back->find(10), nullptr);
  EXPECT_EQ(back->find(10)->staging, stage::StagingAsked::no);
  ASSERT_NE(back->find(9), nullptr);
  EXPECT_EQ(back->find(9)->staging, stage::StagingAsked::yes);
  EXPECT_EQ(back->find(9)->gid, 1003U);
  EXPECT_EQ(back->find(9)->keep_until, 60);
  EXPECT_EQ(back->find(9)->state, JobState::ended);
  // No temporary file is left beside it.
  EXPECT_EQ(std::system(("test $(ls -A '" + dir.path() + "' | wc -l) -eq 1").c_str()), 0);
  write_file(dir / k_registry_file, "{not json");
  EXPECT_FALSE(load(fd.get()));
  write_file(dir / k_registry_file, "{\"jobs\":[{\"job_id\":\"x\"}]}");
  EXPECT_FALSE(load(fd.get()));
}

TEST(Registry, PinsFollowRunningJobsThroughRestartRequeueAndForget)
{
  Registry r;
  r.register_job(job(1, 1001, 1001));
  r.register_job(job(2, 1001, 1001));
  r.add_cache_key(1, "k");
  r.add_cache_key(2, "k");
  r.end_job(1, 10, 0);
  EXPECT_TRUE(r.key_in_use("k")) << "job 2 still uses it";
  auto back = Registry::from_json(r.to_json());
  ASSERT_TRUE(back);
  EXPECT_TRUE(back->key_in_use("k")) << "pins survive a restart";
  back->register_job(job(2, 1001, 1001)); // requeued: a fresh record, nothing pinned
  EXPECT_FALSE(back->key_in_use("k"));
  r.forget(2);
  EXPECT_FALSE(r.key_in_use("k"));
}

// Which running jobs show an entry as a cache view (root's `cache evict` leaves those: the view's
// files are the entry's), apart from those with links of it; kept across a restart, gone at the end.
TEST(Registry, ViewedKeysAreKnownApartFromLinkedOnes)
{
  Registry r;
  r.register_job(job(1, 1001, 1001));
  r.register_job(job(2, 1001, 1001));
  r.add_cache_key(1, "linked");
  r.add_cache_key(2, "shown", Registry::KeyUse::viewed);
  EXPECT_TRUE(r.key_in_use("linked"));
  EXPECT_FALSE(r.key_viewed("linked"));
  EXPECT_TRUE(r.key_in_use("shown"));
  EXPECT_TRUE(r.key_viewed("shown"));
  auto back = Registry::from_json(r.to_json());
  ASSERT_TRUE(back);
  EXPECT_TRUE(back->key_viewed("shown"));
  EXPECT_FALSE(back->key_viewed("linked"));
  back->end_job(2, 10, 0);
  EXPECT_FALSE(back->key_viewed("shown"));
  EXPECT_FALSE(back->key_in_use("shown"));
  auto older = Registry::from_json(R"({"version":1,"jobs":[{"job_id":3,"uid":1,"gid":1,"state":"running",)"
                                   R"("cache_keys":["k"]}]})"); // written before view_keys: none known
  ASSERT_TRUE(older);
  EXPECT_TRUE(older->key_in_use("k"));
  EXPECT_FALSE(older->key_viewed("k"));
}

TEST(Registry, MaxBytesCountsEveryRequestOfAJob)
{
  Registry r;
  r.register_job(job(5, 1001, 1001));
  EXPECT_TRUE(r.charge(5, 600, 1000));
  EXPECT_FALSE(r.charge(5, 500, 1000)) << "a second request may not take the job past max_bytes";
  EXPECT_EQ(r.find(5)->staged_bytes, 600U) << "a refused charge counts nothing";
  EXPECT_TRUE(r.charge(5, 400, 1000));
  EXPECT_FALSE(r.charge(5, 1, 1000));
  auto back = Registry::from_json(r.to_json());
  ASSERT_TRUE(back);
  EXPECT_FALSE(back->charge(5, 1, 1000)) << "counted across daemon restarts";
  r.register_job(job(5, 1001, 1001)); // requeued: a fresh directory, a fresh count
  EXPECT_TRUE(r.charge(5, 1000, 1000));
}

TEST(Registry, ARecordLeftRunningIsEndedOnlyBySlurmctldsWord)
{
  Registry r;
  auto at = [](std::uint32_t id, std::int64_t registered) {
    JobRecord rec = job(id, 1001, 1001);
    rec.registered_at = registered;
    return rec;
  };
  r.register_job(at(10, 100)); // its end_job was missed
  r.register_job(at(11, 100)); // slurmctld says it runs here
  r.register_job(at(12, 100)); // a slurmstepd of it runs here
  r.register_job(at(13, 200)); // registered as (or after) slurmctld was asked
  r.register_job(at(14, 100));
  r.end_job(14, 150, 0);       // ended already
  r.add_cache_key(10, "k10");
  const auto ended = r.ended_by_slurmctld({11}, {12}, 200);
  EXPECT_EQ(ended, (std::vector<std::uint32_t>{10}));
  for (auto id : ended) {
    r.end_job(id, 200, 0);
  }
  EXPECT_FALSE(r.key_in_use("k10")) << "its entries are no longer pinned";
  EXPECT_EQ(r.find(11)->state, JobState::running);
}

// A node that ends tens of thousands of jobs a day keeps its registry small: ended records go after
// a day, and past the most recent ones at once; a kept directory's record and running jobs stay.
// (Left to grow, the file was rewritten at every job's start and end, and past its read limit the
// daemon started with an empty registry, every running job's entries unpinned.)
TEST(Registry, EndedRecordsGoAfterADayOrPastTheMostRecentOnes)
{
  Registry r;
  for (std::uint32_t id = 1; id <= 6; ++id) {
    r.register_job(job(id, 1001, 1001));
  }
  r.end_job(1, 100, 0);
  r.end_job(2, 200, 0);
  r.end_job(3, 300, 5000); // kept until 5000
  r.end_job(4, 400, 0);
  r.end_job(5, 500, 0);    // 6 still runs
  auto sorted = [](std::vector<std::uint32_t> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  EXPECT_TRUE(r.forgettable(1000, 24 * 3600, 100).empty());
  EXPECT_EQ(sorted(r.forgettable(1000, 24 * 3600, 2)), (std::vector<std::uint32_t>{1, 2})); // 5 and 4 stay
  EXPECT_EQ(sorted(r.forgettable(1000, 650, 100)), (std::vector<std::uint32_t>{1, 2}));    // ended over 650 s ago
  EXPECT_EQ(sorted(r.forgettable(6000, 650, 100)), (std::vector<std::uint32_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(sorted(r.forgettable(6000, 24 * 3600, 0)), (std::vector<std::uint32_t>{1, 2, 3, 4, 5}));
}
