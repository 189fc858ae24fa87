// The job directory: created safely under a root-owned base, never adopting planted entries.
#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/gc/collect.hpp"
#include "stagehand/tmpdir/job_dir.hpp"
#include "stagehand/tmpdir/lifecycle.hpp"

#include "test_support.hpp"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>

using namespace stagehand;
using namespace stagehand::test;
using namespace stagehand::tmpdir;

namespace {

constexpr JobOwner k_job{1234, k_attacker_uid, k_attacker_gid};

struct Base
{
  TempDir dir;
  UniqueFd fd;
  Base()
  {
    auto r = fs::open_trusted_dir(dir / "base", fs::CreateMissing::yes);
    if (!r) {
      throw std::runtime_error(r.error().message);
    }
    fd = std::move(*r);
  }
  std::string job() const { return dir / "base/job_1234"; }
};

struct stat lstat_of(const std::string& p)
{
  struct stat st {};
  EXPECT_EQ(::lstat(p.c_str(), &st), 0) << p;
  return st;
}

} // namespace

TEST(JobDir, CreatedWithOwnerAndMode0700)
{
  STAGEHAND_REQUIRE_ROOT();
  Base b;
  auto r = create_job_dir(b.fd.get(), k_job);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(*r, CreateOutcome::created);
  auto st = lstat_of(b.job());
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_uid, k_attacker_uid);
  EXPECT_EQ(st.st_gid, k_attacker_gid);
  EXPECT_EQ(st.st_mode & 07777, 0700U);
  // Only the job directory is left in the base: no staging names.
  EXPECT_EQ(std::system(("test $(ls -A '" + b.dir.path() + "/base' | wc -l) -eq 1").c_str()), 0);
}

TEST(JobDir, PlantedSymlinkIsNeitherFollowedNorAFailure)
{
  STAGEHAND_REQUIRE_ROOT();
  Base b;
  ::mkdir((b.dir / "victim").c_str(), 0755);
  write_file(b.dir / "victim/sentinel", "root");
  ASSERT_EQ(::symlink((b.dir / "victim").c_str(), b.job().c_str()), 0);
  auto r = create_job_dir(b.fd.get(), k_job);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(*r, CreateOutcome::replaced_stale);
  auto st = lstat_of(b.job());
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_uid, k_attacker_uid);
  auto victim = lstat_of(b.dir / "victim");
  EXPECT_EQ(victim.st_uid, 0U) << "the symlink target was chowned";
  EXPECT_EQ(victim.st_mode & 07777, 0755U) << "the symlink target was chmodded";
  EXPECT_EQ(read_file(b.dir / "victim/sentinel"), "root");
}

TEST(JobDir, PlantedDirectoryIsNotAdopted)
{
  STAGEHAND_REQUIRE_ROOT();
  Base b;
  // A stale directory of the same job id, owned by someone else, with content and a 0777 mode.
  ASSERT_EQ(::mkdir(b.job().c_str(), 0777), 0);
  ::chmod(b.job().c_str(), 0777);
  ::chown(b.job().c_str(), 999, 999);
  write_file(b.job() + "/planted", "x");
  struct stat old = lstat_of(b.job());
  auto r = create_job_dir(b.fd.get(), k_job);
  ASSERT_TRUE(r) << r.error().message;
  struct stat fresh = lstat_of(b.job());
  EXPECT_NE(fresh.st_ino, old.st_ino);
  EXPECT_EQ(fresh.st_uid, k_attacker_uid);
  EXPECT_EQ(fresh.st_mode & 07777, 0700U);
  EXPECT_FALSE(exists_nofollow(b.job() + "/planted"));
}

TEST(JobDir, PlantedFileIsReplaced)
{
  STAGEHAND_REQUIRE_ROOT();
  Base b;
  write_file(b.job(), "not a dir");
  ASSERT_TRUE(create_job_dir(b.fd.get(), k_job));
  EXPECT_TRUE(S_ISDIR(lstat_of(b.job()).st_mode));
}

TEST(JobDir, FindJobDirAsTheUser)
{
  STAGEHAND_REQUIRE_ROOT();
  Base b;
  ASSERT_TRUE(create_job_dir(b.fd.get(), k_job));
  EXPECT_EQ(run_as_attacker([&] {
              auto p = find_job_dir(b.dir / "base", 1234, k_attacker_uid);
              return p && *p == b.job();
            }),
            0);
  EXPECT_FALSE(find_job_dir(b.dir / "base", 1234, 555));
  EXPECT_FALSE(find_job_dir(b.dir / "base", 99, k_attacker_uid));
}

// A GC pass reads the base, its job's epilog then keeps the directory (the marker, then the job
// gone from slurmctld), and slurmctld is asked: the listing says orphan, but the directory is kept
// now, and stays (helper-60 found a kept directory removed so, its marker with it).
TEST(JobDir, ADirectoryKeptAfterTheListingWasReadIsNotRemovedAsAnOrphan)
{
  STAGEHAND_REQUIRE_ROOT();
  Base b;
  ASSERT_TRUE(create_job_dir(b.fd.get(), k_job));
  const std::time_t now = std::time(nullptr);
  auto listed = gc::snapshot_base(b.fd.get(), now + 3600); // (old enough: no grace)
  ASSERT_TRUE(listed);
  ASSERT_TRUE(mark_kept(b.fd.get(), k_job.job_id, now + 3600)); // the epilog, meanwhile
  gc::Evidence ended;
  ended.running_here = std::set<std::uint32_t>{}; // then slurmctld: not here any more
  auto plan = gc::make_plan(*listed, ended);
  ASSERT_EQ(plan.remove.size(), 1U);
  EXPECT_EQ(plan.remove[0].reason, gc::Reason::orphan);
  auto applied = gc::apply(b.fd.get(), plan, std::chrono::steady_clock::now() + std::chrono::minutes(5));
  EXPECT_TRUE(applied.failures.empty());
  EXPECT_TRUE(applied.done.empty());
  EXPECT_TRUE(exists_nofollow(b.job()));
  EXPECT_TRUE(exists_nofollow(b.dir / "base/.keep.job_1234"));
  // The next pass, from a listing with the marker: kept until its time is up.
  auto next = gc::make_plan(*gc::snapshot_base(b.fd.get(), now), ended);
  EXPECT_TRUE(next.remove.empty());
}

// The same race with a stale marker listed (an earlier run's, naming another directory): the
// epilog's new marker is neither taken for the stale one nor removed as it; the directory stays
// kept. And a marker that cannot be read keeps no orphan: it goes as before.
TEST(JobDir, AMarkerWrittenAfterTheListingOverAStaleOneKeepsItsDirectory)
{
  STAGEHAND_REQUIRE_ROOT();
  Base b;
  ASSERT_TRUE(create_job_dir(b.fd.get(), k_job));
  const std::time_t now = std::time(nullptr);
  ASSERT_TRUE(mark_kept(b.fd.get(), k_job.job_id, now + 3600));
  const std::string earlier = read_file(b.dir / "base/.keep.job_1234"); // names this first directory
  ASSERT_TRUE(create_job_dir(b.fd.get(), k_job)); // a requeued run's directory (the marker goes)
  write_file(b.dir / "base/.keep.job_1234", earlier); // left behind: stale
  auto listed = gc::snapshot_base(b.fd.get(), now + 3600);
  ASSERT_TRUE(listed);
  ASSERT_TRUE(mark_kept(b.fd.get(), k_job.job_id, now + 3600)); // this run's epilog, meanwhile
  gc::Evidence ended;
  ended.running_here = std::set<std::uint32_t>{};
  auto plan = gc::make_plan(*listed, ended);
  std::vector<gc::Reason> reasons;
  for (const auto& a : plan.remove) {
    if (a.reason != gc::Reason::trash) { // (the earlier run's directory)
      reasons.push_back(a.reason);
    }
  }
  EXPECT_EQ(reasons, (std::vector<gc::Reason>{gc::Reason::orphan, gc::Reason::stale_marker}));
  auto applied = gc::apply(b.fd.get(), plan, std::chrono::steady_clock::now() + std::chrono::minutes(5));
  for (const auto& a : applied.done) {
    EXPECT_EQ(a.reason, gc::Reason::trash) << a.name;
  }
  EXPECT_TRUE(exists_nofollow(b.job()));
  ASSERT_TRUE(exists_nofollow(b.dir / "base/.keep.job_1234"));
  EXPECT_NE(read_file(b.dir / "base/.keep.job_1234"), earlier);
  EXPECT_TRUE(gc::make_plan(*gc::snapshot_base(b.fd.get(), now), ended).remove.empty()); // kept

  // A marker that cannot be read, written after the listing: the orphan goes, with it.
  ASSERT_EQ(::unlink((b.dir / "base/.keep.job_1234").c_str()), 0);
  listed = gc::snapshot_base(b.fd.get(), now + 3600);
  write_file(b.dir / "base/.keep.job_1234", "not a marker");
  plan = gc::make_plan(*listed, ended);
  ASSERT_EQ(plan.remove.size(), 1U);
  EXPECT_EQ(plan.remove[0].reason, gc::Reason::orphan);
  applied = gc::apply(b.fd.get(), plan, std::chrono::steady_clock::now() + std::chrono::minutes(5));
  EXPECT_FALSE(exists_nofollow(b.job()));
  EXPECT_FALSE(exists_nofollow(b.dir / "base/.keep.job_1234"));
}

TEST(JobDir, KeepMarkerAndExpiry)
{
  STAGEHAND_REQUIRE_ROOT();
  Base b;
  ASSERT_TRUE(create_job_dir(b.fd.get(), k_job));
  ASSERT_TRUE(create_job_dir(b.fd.get(), JobOwner{77, k_attacker_uid, k_attacker_gid}));
  std::time_t now = std::time(nullptr);
  ASSERT_TRUE(mark_kept(b.fd.get(), 1234, now + 3600));
  ASSERT_TRUE(mark_kept(b.fd.get(), 77, now - 1));
  // Evidence: slurmctld answered and neither job runs on this node.
  gc::Evidence ended;
  ended.running_here = std::set<std::uint32_t>{};
  auto plan_at = [&](std::time_t t) { return gc::make_plan(*gc::snapshot_base(b.fd.get(), t), ended); };
  auto dry = plan_at(now);
  std::vector<std::string> dirs;
  for (const auto& a : dry.remove) {
    if (a.job_id != 0) {
      dirs.push_back(a.name);
    }
  }
  ASSERT_EQ(dirs.size(), 1U);
  EXPECT_EQ(dirs[0], "job_77");
  EXPECT_TRUE(exists_nofollow(b.dir / "base/job_77"));
  auto gc = gc::apply(b.fd.get(), dry, std::chrono::steady_clock::now() + std::chrono::minutes(5));
  EXPECT_TRUE(gc.failures.empty());
  EXPECT_FALSE(exists_nofollow(b.dir / "base/job_77"));
  EXPECT_FALSE(exists_nofollow(b.dir / "base/.keep.job_77"));
  EXPECT_TRUE(exists_nofollow(b.job()));
  // An hour later the other one goes too.
  gc::apply(b.fd.get(), plan_at(now + 3601), std::chrono::steady_clock::now() + std::chrono::minutes(5));
  EXPECT_FALSE(exists_nofollow(b.job()));
}

TEST(Lifecycle, StartEndAndKeep)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir dir;
  Config config;
  config.tmpdir.base = dir / "scratch/%n";
  JobContext job{k_job, "node7"};
  auto started = on_job_start(config, job);
  ASSERT_TRUE(started) << started.error().message;
  const std::string path = dir / "scratch/node7/job_1234";
  EXPECT_TRUE(exists_nofollow(path));
  auto ended = on_job_end(config, job, Request::create);
  ASSERT_TRUE(ended);
  EXPECT_FALSE(exists_nofollow(path)); // moved to the trash at once
  ASSERT_TRUE(ended->trash);
  EXPECT_TRUE(exists_nofollow(dir / ("scratch/node7/" + *ended->trash)));
  remove_trash(config, "node7", *ended->trash, std::chrono::seconds(10));
  EXPECT_FALSE(exists_nofollow(dir / ("scratch/node7/" + *ended->trash)));

  ASSERT_TRUE(on_job_start(config, job));
  auto kept = on_job_end(config, job, Request::keep);
  ASSERT_TRUE(kept);
  EXPECT_TRUE(exists_nofollow(path));
  // A requeued run of the same job id gets a fresh directory, and none of the earlier run's cache
  // views: their record (which would say "shown as views" of mounts that are gone) goes to the trash.
  write_file(path + "/old", "x");
  ::chown((path + "/old").c_str(), k_attacker_uid, k_attacker_gid);
  ASSERT_EQ(::mkdir((dir / "scratch/node7/.views").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((dir / "scratch/node7/.views/job_1234").c_str(), 0700), 0);
  write_file(dir / "scratch/node7/.views/job_1234/record.abc", "view 1 1 unpacked d\n");
  ASSERT_TRUE(on_job_start(config, job));
  EXPECT_FALSE(exists_nofollow(path + "/old"));
  EXPECT_FALSE(exists_nofollow(dir / "scratch/node7/.views/job_1234"));
  EXPECT_EQ(std::system(("ls -d '" + dir / "scratch/node7" + "'/.trash.views.job_1234.*/record.abc").c_str()), 0);
  EXPECT_FALSE(on_job_start(config, JobContext{k_job, "../etc"}));
  // Without an option, [tmpdir] default decides.
  EXPECT_EQ(effective_request(config, std::nullopt), Request::none);
  config.tmpdir.by_default = true;
  EXPECT_EQ(effective_request(config, std::nullopt), Request::create);
  EXPECT_EQ(effective_request(config, Request::keep), Request::keep);
}

// An earlier run's views that cannot be moved to the trash (here: `.views` is a mount of its own,
// so the rename crosses filesystems) lose their records at least: no task of the new run takes
// them for its own views, and the prolog's line says what happened.
TEST(Lifecycle, AnEarlierRunsViewsThatCannotMoveLoseTheirRecords)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir dir;
  Config config;
  config.tmpdir.base = dir / "scratch/%n";
  JobContext job{k_job, "node7"};
  ASSERT_TRUE(on_job_start(config, job));
  const std::string views = dir / "scratch/node7/.views";
  ASSERT_EQ(::mkdir(views.c_str(), 0700), 0);
  if (::mount("none", views.c_str(), "tmpfs", 0, "size=1m,mode=0700") != 0) {
    GTEST_SKIP() << "SKIPPED LOUDLY: cannot mount tmpfs here (" << std::strerror(errno) << ")";
  }
  ASSERT_EQ(::mkdir((views + "/job_1234").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((views + "/job_1234/view.0").c_str(), 0700), 0);
  write_file(views + "/job_1234/record.abc", "view 1 1 unpacked d\n");
  auto started = on_job_start(config, job);
  const bool records_left = exists_nofollow(views + "/job_1234/record.abc");
  const bool upper_left = exists_nofollow(views + "/job_1234/view.0");
  ::umount2(views.c_str(), MNT_DETACH);
  ASSERT_TRUE(started) << started.error().message;
  EXPECT_NE(started->find("their records were removed"), std::string::npos) << *started;
  EXPECT_FALSE(records_left);
  EXPECT_TRUE(upper_left) << "left for GC";
}
