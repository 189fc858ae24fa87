// The daemon's job registry: operations, JSON form, atomic persistence.
#include "stagehand/registry/registry.hpp"
#include "stagehand/util/fd.hpp"

#include "test_support.hpp"

#include <fcntl.h>

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
  ASSERT_TRUE(save(fd.get(), r));
  auto back = load(fd.get());
  ASSERT_TRUE(back);
  ASSERT_NE(back->find(9), nullptr);
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
