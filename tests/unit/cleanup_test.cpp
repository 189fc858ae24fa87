// Cleanup as root against what jobs leave, off the critical path: a requeued kept job keeps its
// running directory, a prolog collects nothing of others, an epilog without a daemon stops at its
// budget, GC finishes the rest and says a failure once, and no mount is ever asked anything.
#include "stagehand/fs/mounts.hpp"
#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/gc/collect.hpp"
#include "stagehand/job/hooks.hpp"
#include "stagehand/tmpdir/job_dir.hpp"
#include "stagehand/tmpdir/lifecycle.hpp"

#include "node_fixture.hpp"
#include "test_support.hpp"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <ctime>
#include <set>
#include <string>
#include <vector>

using namespace stagehand;
using namespace stagehand::test;

namespace {

gc::Evidence slurmctld_says(std::set<std::uint32_t> running)
{
  gc::Evidence e;
  e.running_here = std::move(running);
  return e;
}

void age(const std::string& path, std::time_t seconds)
{
  struct timespec t[2] = {{std::time(nullptr) - seconds, 0}, {std::time(nullptr) - seconds, 0}};
  ::utimensat(AT_FDCWD, path.c_str(), t, AT_SYMLINK_NOFOLLOW);
}

} // namespace

// Issue 10, item 1: a requeued --tmpdir=keep job. Its first run's keep marker names a directory
// that no longer exists once the second run starts; neither another job's prolog nor GC (whatever
// slurmctld says, and long after keep_for) may take the running job's directory.
TEST(Requeue, AKeptJobsRunningDirectoryIsNeverExpired)
{
  STAGEHAND_REQUIRE_ROOT();
  Node n;
  ASSERT_TRUE(tmpdir::on_job_start(n.config, Node::job()));
  write_file(n.job_dir() + "/first-run", "1");
  auto ended = tmpdir::on_job_end(n.config, Node::job(), tmpdir::Request::keep);
  ASSERT_TRUE(ended) << ended.error().message;
  ASSERT_FALSE(ended->trash);
  const std::string first_marker = read_file(n.base + "/.keep.job_555");
  ASSERT_FALSE(first_marker.empty());

  // The requeued run: a fresh directory; the old marker is gone with the old directory.
  ASSERT_TRUE(tmpdir::on_job_start(n.config, Node::job()));
  EXPECT_FALSE(exists_nofollow(n.base + "/.keep.job_555"));
  EXPECT_FALSE(exists_nofollow(n.job_dir() + "/first-run"));
  write_file(n.job_dir() + "/second-run", "2");
  // Even if the first run's marker comes back (an epilog that ran late), it names the old inode.
  write_file(n.base + "/.keep.job_555", first_marker);

  const std::time_t much_later = std::time(nullptr) + 7200; // far past keep_for
  ASSERT_TRUE(tmpdir::on_job_start(n.config, Node::job({556, k_attacker_uid, k_attacker_gid})));
  gc::Evidence live_step;
  live_step.live_steps = {555};
  live_step.running_here = std::set<std::uint32_t>{};
  for (const auto& evidence : {slurmctld_says({555}), gc::Evidence{}, live_step}) {
    auto applied = n.gc(evidence, much_later);
    EXPECT_EQ(read_file(n.job_dir() + "/second-run"), "2");
    for (const auto& a : applied.done) {
      EXPECT_NE(a.name, "job_555");
    }
  }
}

// Issue 10, item 2: a prolog makes its job's directory and nothing else; other jobs' directories,
// expired or orphaned, trash and leftovers are GC's. A stale directory at its own name (a requeued
// kept job) goes to the trash in O(1), not removed on the critical path.
TEST(Prolog, NeverRemovesAnotherJobsDirectory)
{
  STAGEHAND_REQUIRE_ROOT();
  Node n;
  const tmpdir::JobOwner expired{600, k_attacker_uid, k_attacker_gid};
  ASSERT_TRUE(tmpdir::on_job_start(n.config, Node::job(expired)));
  ASSERT_TRUE(tmpdir::on_job_end(n.config, Node::job(expired), tmpdir::Request::keep));
  ASSERT_TRUE(tmpdir::on_job_start(n.config, Node::job({601, k_attacker_uid, k_attacker_gid})));
  ::mkdir((n.base + "/.trash.job_602.1.0").c_str(), 0700);
  ::mkdir((n.base + "/.new.job_603.1.0").c_str(), 0700);
  for (const auto& name : {"job_600", "job_601", ".trash.job_602.1.0", ".new.job_603.1.0"}) {
    write_file(n.base + "/" + name + "/data", "left");
    age(n.base + "/" + name, 3600);
  }
  // The requeued job's own kept directory, holding a lot.
  ASSERT_TRUE(tmpdir::on_job_start(n.config, Node::job()));
  ASSERT_TRUE(tmpdir::on_job_end(n.config, Node::job(), tmpdir::Request::keep));
  write_file(n.job_dir() + "/old-run", "old");
  ::sleep(2); // keep_for (1 s) has passed for every marker

  auto started = job::job_start(n.config, Node::job(), stage::StagingAsked::yes);
  ASSERT_TRUE(started) << started.error().message;
  EXPECT_NE(started->find("a stale entry moved to the trash"), std::string::npos) << *started;
  for (const auto& name : {"job_600", "job_601", ".trash.job_602.1.0", ".new.job_603.1.0"}) {
    EXPECT_EQ(read_file(n.base + "/" + name + "/data"), "left") << name;
  }
  EXPECT_TRUE(exists_nofollow(n.base + "/.keep.job_600"));
  EXPECT_FALSE(exists_nofollow(n.job_dir() + "/old-run"));
  bool old_run_in_trash = false;
  for (const auto& t : n.trash()) {
    old_run_in_trash = old_run_in_trash || read_file(n.base + "/" + t + "/old-run") == "old";
  }
  EXPECT_TRUE(old_run_in_trash) << "the prolog removed the stale directory instead of moving it";
  // GC, off the critical path, takes what has ended.
  n.gc(slurmctld_says({555}));
  for (const auto& name : {"job_600", "job_601", ".trash.job_602.1.0", ".new.job_603.1.0"}) {
    EXPECT_FALSE(exists_nofollow(n.base + "/" + name)) << name;
  }
  EXPECT_TRUE(n.trash().empty());
  EXPECT_TRUE(exists_nofollow(n.job_dir()));
}

// Issue 10, item 2: without a daemon the epilog removes for at most its budget, in a child, and
// returns; the rest stays in the trash and the next `stagehand gc` removes it.
TEST(Epilog, WithoutADaemonStopsAtItsBudgetAndGcFinishes)
{
  STAGEHAND_REQUIRE_ROOT();
  Node n;
  ASSERT_TRUE(job::job_start(n.config, Node::job(), stage::StagingAsked::yes));
  const std::string job = n.job_dir();
  ASSERT_EQ(run_as_attacker([&] {
              for (int d = 0; d < 40; ++d) {
                const std::string sub = job + "/d" + std::to_string(d);
                if (::mkdir(sub.c_str(), 0700) != 0) {
                  return false;
                }
                for (int f = 0; f < 1000; ++f) {
                  ::close(::open((sub + "/" + std::to_string(f)).c_str(), O_CREAT | O_WRONLY, 0600));
                }
              }
              return true;
            }),
            0);
  // A 1 ms budget stands for a tree far bigger than 3 s of removal: 40,000 unlinks never fit.
  auto ended = job::job_end(n.config, Node::job(), tmpdir::Request::create, std::chrono::milliseconds(1));
  ASSERT_TRUE(ended) << ended.error().message;
  EXPECT_NE(ended->find("no daemon"), std::string::npos) << *ended;
  EXPECT_NE(ended->find("time budget"), std::string::npos) << *ended;
  EXPECT_FALSE(exists_nofollow(job));
  ASSERT_EQ(n.trash().size(), 1U) << "the rest must wait in the trash";
  auto applied = n.gc(slurmctld_says({}));
  EXPECT_TRUE(applied.failures.empty());
  EXPECT_TRUE(n.trash().empty());
}

// Issue 10, item 3, and issue 24, item 3: a mount the job left inside its directory is detached
// by the epilog, which then removes all of it (nothing stays pinned in the trash). A job whose
// epilog never ran (a node that went down) leaves its mount to GC, which detaches it and removes
// the rest. A failure GC meets at every pass is said once, until it stops failing.
TEST(Gc, AMountLeftInsideIsDetachedByTheEpilogElseByGcAndAFailureIsSaidOnce)
{
  STAGEHAND_REQUIRE_ROOT();
  Node n;
  ASSERT_TRUE(job::job_start(n.config, Node::job(), stage::StagingAsked::yes));
  const std::string mnt = n.job_dir() + "/mnt";
  ::mkdir(mnt.c_str(), 0755);
  ASSERT_EQ(::mount("none", mnt.c_str(), "tmpfs", 0, "size=1m"), 0) << std::strerror(errno);
  write_file(mnt + "/inside", "pinned under the mount");
  write_file(n.job_dir() + "/plain", "x");
  auto ended = job::job_end(n.config, Node::job(), tmpdir::Request::create);
  ASSERT_TRUE(ended) << ended.error().message;
  EXPECT_NE(ended->find("detached 1 mount(s) the user left: " + mnt + "; moved"), std::string::npos) << *ended;
  EXPECT_EQ(ended->find("left in place"), std::string::npos) << *ended;
  EXPECT_TRUE(mounts_below(n.base).empty()) << "the epilog left a mount: " << mounts_below(n.base).at(0);
  EXPECT_TRUE(n.trash().empty()) << "something stayed pinned in the trash: " << *ended;
  EXPECT_FALSE(exists_nofollow(n.job_dir()));

  // Job 556's epilog never ran: its mount is still there when GC decides the job ended.
  const tmpdir::JobOwner orphan{556, k_attacker_uid, k_attacker_gid};
  ASSERT_TRUE(tmpdir::on_job_start(n.config, Node::job(orphan)));
  const std::string orphan_mnt = n.job_dir(556) + "/mnt";
  ::mkdir(orphan_mnt.c_str(), 0755);
  ASSERT_EQ(::mount("none", orphan_mnt.c_str(), "tmpfs", 0, "size=1m"), 0) << std::strerror(errno);
  write_file(orphan_mnt + "/inside", "pinned under the mount");
  write_file(n.job_dir(556) + "/plain", "x");
  auto pass = n.gc(slurmctld_says({}), std::time(nullptr) + 3600);
  EXPECT_TRUE(pass.failures.empty()) << pass.failures.at(0).message;
  ASSERT_EQ(pass.detached.size(), 1U);
  EXPECT_TRUE(pass.detached[0].starts_with(".trash.job_556.") && pass.detached[0].ends_with("/mnt")) << pass.detached[0];
  EXPECT_TRUE(mounts_below(n.base).empty()) << "GC left a mount: " << mounts_below(n.base).at(0);
  EXPECT_FALSE(exists_nofollow(n.job_dir(556)));
  EXPECT_TRUE(n.trash().empty());

  gc::ReportOnce reports;
  gc::Applied failing;
  failing.failures.push_back(gc::Failure{".trash.x", ".trash.x/m is a mount point: left in place (EPERM)"});
  EXPECT_EQ(reports.fresh(failing).size(), 1U);
  EXPECT_TRUE(reports.fresh(failing).empty()) << "said again at the next pass";
  EXPECT_TRUE(reports.fresh(gc::Applied{}).empty());
  EXPECT_EQ(reports.fresh(failing).size(), 1U) << "a new failure after it stopped failing is said again";
}

// Issue 10, item 4: a job mounts a FUSE filesystem that never answers on its own directory. The
// epilog (kept or not), GC's listing and GC's removal never ask it anything: they return. The
// epilog detaches it and removes the directory; for a job whose epilog never ran GC does.
TEST(Gc, NeverAsksAHungFuseMountOnAJobDirectory)
{
  STAGEHAND_REQUIRE_ROOT();
  Node n;
  const tmpdir::JobOwner orphan{556, k_attacker_uid, k_attacker_gid};
  ASSERT_TRUE(job::job_start(n.config, Node::job(), stage::StagingAsked::yes));
  ASSERT_TRUE(job::job_start(n.config, Node::job(orphan), stage::StagingAsked::yes));
  HangingMount hang(n.job_dir());
  ASSERT_TRUE(hang.mounted()) << "hangfs did not mount (needs /dev/fuse, python3-fusepy, libfuse2)";
  HangingMount orphan_hang(n.job_dir(556)); // its epilog never runs
  ASSERT_TRUE(orphan_hang.mounted());
  auto said = run_with_watchdog(
    [&] {
      std::string out;
      UniqueFd base = n.base_fd();
      auto snap = gc::snapshot_base(base.get(), std::time(nullptr) + 7200);
      out += "mount_points=" + std::to_string(snap->mount_points.size()) + ";";
      auto running = n.gc(slurmctld_says({555, 556}), std::time(nullptr) + 7200);
      for (const auto& f : running.failures) {
        out += f.message + ";";
      }
      auto kept = job::job_end(n.config, Node::job(), tmpdir::Request::keep);
      out += kept ? *kept + ";" : kept.error().message + ";";
      auto ended = job::job_end(n.config, Node::job(), tmpdir::Request::create);
      out += ended ? *ended + ";" : ended.error().message + ";";
      out += is_mount_point(n.job_dir()) ? "555 still mounted;" // (a stat there would ask it)
             : exists_nofollow(n.job_dir()) ? "555 still there;" : "555 removed;";
      // Job 556 ended: GC detaches its mount (asking it nothing) and removes the directory.
      auto applied = n.gc(slurmctld_says({}), std::time(nullptr) + 7200);
      for (const auto& f : applied.failures) {
        out += f.message + ";";
      }
      for (const auto& d : applied.detached) {
        out += "detached " + d + ";";
      }
      out += is_mount_point(n.job_dir(556)) ? "556 still mounted;" // (a stat there would ask it)
             : exists_nofollow(n.job_dir(556)) ? "556 still there;" : "556 removed;";
      return out;
    },
    std::chrono::seconds(60), [&] {
      hang.release();
      orphan_hang.release();
    });
  ASSERT_TRUE(said) << "an epilog or GC hung on a FUSE mount";
  EXPECT_NE(said->find("mount_points=2;"), std::string::npos) << *said;
  EXPECT_EQ(said->find("is a mount point: left in place"), std::string::npos) << *said; // a running job's
  EXPECT_NE(said->find("cannot keep job_555: it is a mount point"), std::string::npos) << *said;
  EXPECT_NE(said->find("detached 1 mount(s) the user left: " + n.job_dir() + "; moved " + n.job_dir() + " to the trash"),
            std::string::npos)
    << *said;
  EXPECT_NE(said->find("555 removed;"), std::string::npos) << *said;
  EXPECT_NE(said->find(";detached job_556;556 removed;"), std::string::npos) << *said;
  EXPECT_TRUE(mounts_below(n.base).empty()) << mounts_below(n.base).at(0);
}

// Issue 10, item 12: what an interrupted create or marker write leaves (".new.*", a marker's
// temporary file) is removed by GC once old enough; one in progress is not.
TEST(Gc, LeftoversOfInterruptedCreatesAreRemoved)
{
  STAGEHAND_REQUIRE_ROOT();
  Node n;
  ASSERT_TRUE(tmpdir::on_job_start(n.config, Node::job()));
  ::mkdir((n.base + "/.new.job_9.123.0").c_str(), 0700);
  write_file(n.base + "/.new.job_9.123.0/f", "x");
  ::chown((n.base + "/.new.job_9.123.0").c_str(), k_attacker_uid, k_attacker_gid);
  write_file(n.base + "/.keep.job_9.tmp.123.0", "12 34\n");
  ::mkdir((n.base + "/.new.job_10.124.0").c_str(), 0700);
  age(n.base + "/.new.job_9.123.0", 3600);
  age(n.base + "/.keep.job_9.tmp.123.0", 3600);
  n.gc(slurmctld_says({555}));
  EXPECT_FALSE(exists_nofollow(n.base + "/.new.job_9.123.0"));
  EXPECT_FALSE(exists_nofollow(n.base + "/.keep.job_9.tmp.123.0"));
  EXPECT_TRUE(exists_nofollow(n.base + "/.new.job_10.124.0")); // a create in progress
  EXPECT_TRUE(exists_nofollow(n.job_dir()));
}
