// Issue 24, item 3: after its job a directory is root's (the user can neither enter it nor mount
// on it), the epilog detaches what the user left mounted on it or below it, a stage-out copy gets
// it back for its own time only, GC detaches what a user mounted on or below a directory it
// collects (through an fd, never the base or above), and root's open of a stage-out directory
// never crosses a mount.
#include "stagehand/fs/mounts.hpp"
#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/gc/collect.hpp"
#include "stagehand/job/stage_out.hpp"
#include "stagehand/stageout/copy.hpp"
#include "stagehand/stageout/kept.hpp"
#include "stagehand/stageout/spec.hpp"
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
#include <string>
#include <vector>

#include <gtest/gtest.h>

using namespace stagehand;
using namespace stagehand::test;

namespace {

struct stat stat_of(const std::string& path)
{
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

bool taken_away(const std::string& path)
{
  struct stat st = stat_of(path);
  return st.st_uid == 0 && st.st_gid == 0 && (st.st_mode & 07777) == 0700;
}

// Whether the attacker can enter `path` (open a directory beneath it, as a mount would need).
bool user_can_enter(const std::string& path)
{
  return run_as_attacker([&] { return ::access(path.c_str(), X_OK) == 0; }) == 0;
}

// A tmpfs a user "left" at `path` (root mounts it: the kernel does not care who did).
bool mount_tmpfs(const std::string& path)
{
  ::mkdir(path.c_str(), 0755);
  return ::mount("none", path.c_str(), "tmpfs", 0, "size=1m") == 0;
}

std::string canonical(const std::string& text, const std::string& submit_dir)
{
  auto specs = stageout::parse_option(text);
  EXPECT_TRUE(specs) << text;
  return specs ? stageout::canonical_option(*specs, submit_dir) : std::string();
}

} // namespace

TEST(UserMounts, AtJobEndTheDirectoryIsTakenFromItsUserUnlessKept)
{
  STAGEHAND_REQUIRE_ROOT();
  Node n;
  ASSERT_TRUE(tmpdir::on_job_start(n.config, Node::job()));
  EXPECT_TRUE(user_can_enter(n.job_dir()));
  auto ended = tmpdir::on_job_end(n.config, Node::job(), tmpdir::Request::create);
  ASSERT_TRUE(ended && ended->trash) << (ended ? ended->summary : ended.error().message);
  EXPECT_TRUE(taken_away(n.base + "/" + *ended->trash));
  EXPECT_FALSE(user_can_enter(n.base + "/" + *ended->trash));

  ASSERT_TRUE(tmpdir::on_job_start(n.config, Node::job()));
  auto aside = tmpdir::on_job_end(n.config, Node::job(), tmpdir::Request::create, tmpdir::EndMove::to_stage_out);
  ASSERT_TRUE(aside && aside->pending);
  EXPECT_TRUE(taken_away(n.base + "/" + *aside->pending));
  EXPECT_FALSE(user_can_enter(n.base + "/" + *aside->pending));

  // --tmpdir=keep: SPEC promises the directory to its user for keep_for.
  ASSERT_TRUE(tmpdir::on_job_start(n.config, Node::job()));
  ASSERT_TRUE(tmpdir::on_job_end(n.config, Node::job(), tmpdir::Request::keep));
  EXPECT_EQ(stat_of(n.job_dir()).st_uid, k_attacker_uid);
  EXPECT_TRUE(user_can_enter(n.job_dir()));
}

// The copy runs as the user through the directory's fd: handed back for the copy, taken away
// after it; results that could not be copied are the user's again (kept for them, as keep is).
TEST(UserMounts, AStageOutCopyGetsTheDirectoryBackForItsTimeOnly)
{
  STAGEHAND_REQUIRE_ROOT();
  Node n;
  const std::string dest = n.dir / "dest";
  ASSERT_EQ(::mkdir(dest.c_str(), 0755), 0);
  ASSERT_EQ(::chown(dest.c_str(), k_attacker_uid, k_attacker_gid), 0);
  ASSERT_TRUE(tmpdir::on_job_start(n.config, Node::job()));
  write_file(n.job_dir() + "/result", "42");
  ::chown((n.job_dir() + "/result").c_str(), k_attacker_uid, k_attacker_gid);
  { // the job's first node (its task marks it, as the user)
    UniqueFd job_fd(::open(n.job_dir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    ASSERT_EQ(run_as_attacker([&] { return static_cast<bool>(stageout::mark_first_node(job_fd.get())); }), 0);
  }
  auto aside = tmpdir::on_job_end(n.config, Node::job(), tmpdir::Request::create, tmpdir::EndMove::to_stage_out);
  ASSERT_TRUE(aside && aside->pending);
  const std::string pending = n.base + "/" + *aside->pending;
  ASSERT_TRUE(taken_away(pending));

  const job::StageOutJob out{canonical("result:" + dest + "/result", n.dir.path()), n.dir.path()};
  auto r = job::stage_out(n.config, Node::job(), out, *aside->pending, std::chrono::seconds(30));
  EXPECT_EQ(r.outcome, job::CopyOutcome::complete) << r.said;
  EXPECT_EQ(read_file(dest + "/result"), "42") << r.said;
  EXPECT_TRUE(taken_away(pending)) << "given back to the user after the copy";

  // A copy that cannot complete: the results are kept for their user.
  ASSERT_EQ(::chmod(dest.c_str(), 0555), 0);
  ::unlink((dest + "/result").c_str());
  auto failed = job::stage_out(n.config, Node::job(), out, *aside->pending, std::chrono::seconds(30));
  EXPECT_EQ(failed.outcome, job::CopyOutcome::failed) << failed.said;
  EXPECT_TRUE(taken_away(pending));
  job::keep_results(n.config, Node::job(), out, *aside->pending, failed.reason());
  EXPECT_EQ(stat_of(pending).st_uid, k_attacker_uid);
  EXPECT_TRUE(user_can_enter(pending));
}

// Root's open of a stage-out directory never crosses a mount: a tmpfs mounted on it is never
// copied from (nothing of it reaches DEST) and the line says why.
TEST(UserMounts, AStageOutNeverCopiesFromAMountOnItsDirectory)
{
  STAGEHAND_REQUIRE_ROOT();
  Node n;
  const std::string dest = n.dir / "dest";
  ASSERT_EQ(::mkdir(dest.c_str(), 0777), 0);
  ASSERT_TRUE(tmpdir::on_job_start(n.config, Node::job()));
  auto aside = tmpdir::on_job_end(n.config, Node::job(), tmpdir::Request::create, tmpdir::EndMove::to_stage_out);
  ASSERT_TRUE(aside && aside->pending);
  const std::string pending = n.base + "/" + *aside->pending;
  if (!mount_tmpfs(pending)) {
    GTEST_SKIP() << "SKIPPED LOUDLY: cannot mount tmpfs here (" << std::strerror(errno) << ")";
  }
  ::chown(pending.c_str(), k_attacker_uid, k_attacker_gid);
  write_file(pending + "/planted", "from the mount");
  ::chown((pending + "/planted").c_str(), k_attacker_uid, k_attacker_gid);
  auto r = job::stage_out(n.config, Node::job(), job::StageOutJob{canonical("planted:" + dest + "/planted", n.dir.path()), n.dir.path()}, *aside->pending,
                          std::chrono::seconds(30));
  ::umount2(pending.c_str(), MNT_DETACH);
  EXPECT_EQ(r.outcome, job::CopyOutcome::failed);
  EXPECT_FALSE(exists_nofollow(dest + "/planted")) << r.said;
  EXPECT_NE(r.said.find("nothing copied"), std::string::npos) << r.said;
}

// A mount a user left inside the job's directory: the epilog detaches it and the trash holds
// nothing pinned. A --tmpdir=keep directory stays the user's, mount and all, until keep_for is up;
// then GC detaches the mount and removes all of it.
TEST(UserMounts, AMountInsideIsDetachedByTheEpilogOrByGcWhenKeptExpires)
{
  STAGEHAND_REQUIRE_ROOT();
  Node n;
  ASSERT_TRUE(tmpdir::on_job_start(n.config, Node::job()));
  write_file(n.job_dir() + "/plain", "x");
  if (!mount_tmpfs(n.job_dir() + "/pin")) {
    GTEST_SKIP() << "SKIPPED LOUDLY: cannot mount tmpfs here (" << std::strerror(errno) << ")";
  }
  write_file(n.job_dir() + "/pin/hidden", "y");
  auto ended = tmpdir::on_job_end(n.config, Node::job(), tmpdir::Request::create);
  ASSERT_TRUE(ended && ended->trash) << (ended ? ended->summary : ended.error().message);
  EXPECT_TRUE(ended->summary.starts_with("detached 1 mount(s) the user left: " + n.job_dir() + "/pin; moved "))
    << ended->summary;
  const std::string trash = n.base + "/" + *ended->trash;
  EXPECT_TRUE(taken_away(trash));
  EXPECT_FALSE(is_mount_point(trash + "/pin"));
  EXPECT_FALSE(exists_nofollow(trash + "/pin/hidden")); // that was the tmpfs's, now gone
  EXPECT_TRUE(mounts_below(n.base).empty()) << mounts_below(n.base).at(0);
  auto removed = n.gc();
  EXPECT_TRUE(removed.failures.empty()) << removed.failures.at(0).message;
  EXPECT_TRUE(removed.detached.empty()) << "nothing was left for GC to detach";
  EXPECT_FALSE(exists_nofollow(trash));

  // Kept: the user's for keep_for, its mount included; then GC's.
  ASSERT_TRUE(tmpdir::on_job_start(n.config, Node::job()));
  ASSERT_TRUE(mount_tmpfs(n.job_dir() + "/pin"));
  write_file(n.job_dir() + "/pin/hidden", "y");
  auto kept = tmpdir::on_job_end(n.config, Node::job(), tmpdir::Request::keep);
  ASSERT_TRUE(kept) << kept.error().message;
  EXPECT_TRUE(is_mount_point(n.job_dir() + "/pin"));
  EXPECT_EQ(stat_of(n.job_dir()).st_uid, k_attacker_uid);
  auto applied = n.gc(std::time(nullptr) + 3600); // keep_for (1 s) is up
  EXPECT_TRUE(applied.failures.empty()) << applied.failures.at(0).message;
  ASSERT_EQ(applied.detached.size(), 1U);
  EXPECT_TRUE(applied.detached[0].starts_with(".trash.job_555.") && applied.detached[0].ends_with("/pin"))
    << applied.detached[0];
  EXPECT_TRUE(mounts_below(n.base).empty()) << mounts_below(n.base).at(0);
  EXPECT_FALSE(exists_nofollow(n.job_dir()));
  EXPECT_FALSE(exists_nofollow(n.base + "/.keep.job_555"));
}

// A mount on the job's directory itself: the epilog detaches it, uncovering the directory, and
// moves that to the trash. A job whose epilog never ran leaves it to GC, which, deciding the job
// ended, detaches it, then removes the directory; a running job's mount is left alone.
TEST(UserMounts, AMountOnAnEndedJobsDirectoryIsDetachedByTheEpilogOrByGc)
{
  STAGEHAND_REQUIRE_ROOT();
  Node n;
  ASSERT_TRUE(tmpdir::on_job_start(n.config, Node::job()));
  write_file(n.job_dir() + "/under-the-mount", "pinned");
  if (!mount_tmpfs(n.job_dir())) {
    GTEST_SKIP() << "SKIPPED LOUDLY: cannot mount tmpfs here (" << std::strerror(errno) << ")";
  }
  auto ended = tmpdir::on_job_end(n.config, Node::job(), tmpdir::Request::create);
  ASSERT_TRUE(ended && ended->trash) << (ended ? ended->summary : ended.error().message);
  EXPECT_TRUE(ended->summary.starts_with("detached 1 mount(s) the user left: " + n.job_dir() + "; moved "))
    << ended->summary;
  const std::string trash = n.base + "/" + *ended->trash;
  EXPECT_FALSE(is_mount_point(trash));
  EXPECT_TRUE(taken_away(trash));
  EXPECT_EQ(read_file(trash + "/under-the-mount"), "pinned"); // the job's own directory, uncovered
  EXPECT_TRUE(mounts_below(n.base).empty()) << mounts_below(n.base).at(0);
  auto removed = n.gc();
  EXPECT_TRUE(removed.failures.empty()) << removed.failures.at(0).message;
  EXPECT_TRUE(removed.detached.empty());
  EXPECT_FALSE(exists_nofollow(trash));

  // The epilog never ran (a node that went down): GC decides the job ended.
  ASSERT_TRUE(tmpdir::on_job_start(n.config, Node::job()));
  write_file(n.job_dir() + "/under-the-mount", "pinned");
  ASSERT_TRUE(mount_tmpfs(n.job_dir()));
  auto applied = n.gc(std::time(nullptr) + 3600);
  EXPECT_TRUE(applied.failures.empty()) << applied.failures.at(0).message;
  EXPECT_EQ(applied.detached, std::vector<std::string>{"job_555"});
  EXPECT_TRUE(mounts_below(n.base).empty()) << mounts_below(n.base).at(0);
  EXPECT_FALSE(exists_nofollow(n.job_dir()));

  // A running job's mount is its own business: left alone.
  ASSERT_TRUE(tmpdir::on_job_start(n.config, Node::job()));
  ASSERT_TRUE(mount_tmpfs(n.job_dir()));
  gc::Evidence running;
  running.live_steps = {555};
  UniqueFd fd = n.base_fd();
  auto snap = gc::snapshot_base(fd.get(), std::time(nullptr) + 3600);
  auto again = gc::apply(fd.get(), gc::make_plan(*snap, running), std::chrono::steady_clock::now() + std::chrono::minutes(1));
  EXPECT_TRUE(again.detached.empty());
  EXPECT_TRUE(is_mount_point(n.job_dir()));
  ::umount2(n.job_dir().c_str(), MNT_DETACH);
}

// Only what lies below the entry: not a sibling whose name starts the same, not the base itself.
TEST(UserMounts, DetachTouchesOnlyMountsBelowTheEntry)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir t;
  const std::string base = t / "base";
  ASSERT_EQ(::mkdir(base.c_str(), 0755), 0);
  if (!mount_tmpfs(base)) { // the base on a mount of its own
    GTEST_SKIP() << "SKIPPED LOUDLY: cannot mount tmpfs here (" << std::strerror(errno) << ")";
  }
  ASSERT_EQ(::mkdir((base + "/job_1").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((base + "/job_10").c_str(), 0700), 0);
  ASSERT_TRUE(mount_tmpfs(base + "/job_1/a"));
  ASSERT_TRUE(mount_tmpfs(base + "/job_1/a/b")); // inside the other: goes with it
  ASSERT_TRUE(mount_tmpfs(base + "/job_10/c"));
  UniqueFd base_fd(::open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  auto with = fs::entries_with_mounts(base_fd.get());
  ASSERT_TRUE(with);
  EXPECT_EQ(*with, (std::set<std::string>{"job_1", "job_10"}));
  auto detached = fs::detach_mounts_below(base_fd.get(), "job_1");
  ASSERT_TRUE(detached) << detached.error().message;
  EXPECT_EQ(*detached, std::vector<std::string>{"job_1/a"});
  EXPECT_FALSE(is_mount_point(base + "/job_1/a"));
  EXPECT_TRUE(is_mount_point(base + "/job_10/c"));
  EXPECT_TRUE(is_mount_point(base));
  EXPECT_FALSE(fs::detach_mounts_below(base_fd.get(), ".."));
  EXPECT_FALSE(fs::detach_mounts_below(base_fd.get(), "job_10/c"));
  ::umount2((base + "/job_10/c").c_str(), MNT_DETACH);
  ::umount2(base.c_str(), MNT_DETACH);
}

TEST(UserMounts, MountinfoPathsAreUnescaped)
{
  auto m = fs::parse_mountinfo("36 35 98:0 / /mnt/a\\040b\\134c rw - ext3 /dev/root rw\n"
                               "garbage\n"
                               "37 36 0:5 / /x rw shared:1 - tmpfs none rw\n");
  ASSERT_EQ(m.size(), 2U);
  EXPECT_EQ(m[0].id, 36U);
  EXPECT_EQ(m[0].parent, 35U);
  EXPECT_EQ(m[0].point, "/mnt/a b\\c");
  EXPECT_EQ(m[1].point, "/x");
}

// Issue 24, item 6: a stage-out directory nothing copies from any more (an epilog killed mid-copy)
// becomes kept results with a record, and goes with it at keep_for: never deleted unrecorded.
TEST(UserMounts, AStrayStageOutIsRecordedThenExpires)
{
  STAGEHAND_REQUIRE_ROOT();
  Node n;
  ASSERT_TRUE(tmpdir::on_job_start(n.config, Node::job()));
  auto aside = tmpdir::on_job_end(n.config, Node::job(), tmpdir::Request::create, tmpdir::EndMove::to_stage_out);
  ASSERT_TRUE(aside && aside->pending);
  const std::time_t later = std::time(nullptr) + 7200;
  auto pass1 = n.gc(later);
  EXPECT_EQ(pass1.recorded, std::vector<std::string>{*aside->pending});
  EXPECT_TRUE(pass1.done.empty());
  EXPECT_TRUE(exists_nofollow(n.base + "/" + *aside->pending));
  UniqueFd fd = n.base_fd();
  auto kept = stageout::load_kept(fd.get());
  ASSERT_EQ(kept.size(), 1U);
  EXPECT_EQ(kept[0].job_id, 555U);
  EXPECT_EQ(kept[0].dir, *aside->pending);
  EXPECT_EQ(kept[0].until, later + gc::Options{}.keep_for_seconds);
  auto pass2 = n.gc(kept[0].until + 1);
  EXPECT_TRUE(pass2.recorded.empty());
  EXPECT_FALSE(exists_nofollow(n.base + "/" + *aside->pending));
  EXPECT_TRUE(stageout::load_kept(fd.get()).empty());
}
