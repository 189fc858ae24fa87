// remove_tree as root against a tree the attacker owns and keeps changing.
#include "stagehand/fs/remove_tree.hpp"
#include "stagehand/util/fd.hpp"

#include "test_support.hpp"

#include <fcntl.h>
#include <cstring>
#include <cstdlib>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace stagehand;
using namespace stagehand::test;

namespace {

struct Tree
{
  TempDir dir;
  UniqueFd base;
  std::string victim; // outside the job tree: must survive
  Tree()
  {
    base.reset(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    victim = dir / "victim";
    ::mkdir(victim.c_str(), 0755);
    write_file(victim + "/sentinel", "root's data");
    ::mkdir((dir / "job").c_str(), 0700);
    ::chown((dir / "job").c_str(), k_attacker_uid, k_attacker_gid);
  }
  std::string job(const std::string& rel = "") const { return rel.empty() ? dir / "job" : dir / ("job/" + rel); }
  void expect_victim_intact() const
  {
    EXPECT_EQ(read_file(victim + "/sentinel"), "root's data");
  }
};

} // namespace

TEST(RemoveTree, MissingNameIsSuccess)
{
  TempDir dir;
  UniqueFd fd(::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY));
  EXPECT_TRUE(fs::remove_tree(fd.get(), "nothing-here"));
  EXPECT_FALSE(fs::remove_tree(fd.get(), "../x"));
  EXPECT_FALSE(fs::remove_tree(fd.get(), ".."));
}

TEST(RemoveTree, RemovesFilesDirsSymlinksAndUnreadableDirs)
{
  STAGEHAND_REQUIRE_ROOT();
  Tree t;
  ASSERT_EQ(run_as_attacker([&] {
              bool ok = ::mkdir(t.job("a").c_str(), 0755) == 0 && ::mkdir(t.job("a/b").c_str(), 0755) == 0;
              write_file(t.job("a/b/f"), "x");
              ok = ok && ::mkfifo(t.job("fifo").c_str(), 0600) == 0;
              ok = ok && ::symlink("/nonexistent", t.job("dangling").c_str()) == 0;
              ok = ok && ::mkdir(t.job("locked").c_str(), 0700) == 0;
              write_file(t.job("locked/inside"), "y");
              ok = ok && ::mkdir(t.job("locked/deeper").c_str(), 0700) == 0;
              ok = ok && ::chmod(t.job("locked/deeper").c_str(), 0) == 0;
              ok = ok && ::chmod(t.job("locked").c_str(), 0) == 0; // 0000: root still removes it
              return ok;
            }),
            0);
  fs::RemoveStats stats;
  auto st = fs::remove_tree(t.base.get(), "job", &stats);
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_FALSE(exists_nofollow(t.job()));
  EXPECT_GE(stats.removed, 9U);
}

TEST(RemoveTree, PlantedSymlinksAreUnlinkedNotFollowed)
{
  STAGEHAND_REQUIRE_ROOT();
  Tree t;
  ASSERT_EQ(run_as_attacker([&] {
              return ::symlink(t.victim.c_str(), t.job("to_dir").c_str()) == 0 &&
                     ::symlink((t.victim + "/sentinel").c_str(), t.job("to_file").c_str()) == 0 &&
                     ::symlink("/etc", t.job("to_etc").c_str()) == 0;
            }),
            0);
  ASSERT_TRUE(fs::remove_tree(t.base.get(), "job"));
  t.expect_victim_intact();
  EXPECT_TRUE(exists_nofollow("/etc/passwd"));
  EXPECT_FALSE(exists_nofollow(t.job()));
}

TEST(RemoveTree, TopLevelSymlinkIsUnlinkedOnly)
{
  STAGEHAND_REQUIRE_ROOT();
  Tree t;
  ::rmdir(t.job().c_str());
  ASSERT_EQ(::symlink(t.victim.c_str(), t.job().c_str()), 0);
  ASSERT_TRUE(fs::remove_tree(t.base.get(), "job"));
  EXPECT_FALSE(exists_nofollow(t.job()));
  t.expect_victim_intact();
}

// The attacker swaps a directory for a symlink to the victim, over and over, while root removes.
TEST(RemoveTree, DirectorySwappedForSymlinkDuringRemoval)
{
  STAGEHAND_REQUIRE_ROOT();
  for (int round = 0; round < 10; ++round) {
    Tree t;
    ASSERT_EQ(run_as_attacker([&] {
                bool ok = true;
                for (int i = 0; i < 50 && ok; ++i) {
                  std::string d = t.job("d" + std::to_string(i));
                  ok = ::mkdir(d.c_str(), 0755) == 0;
                  for (int j = 0; j < 20 && ok; ++j) {
                    write_file(d + "/f" + std::to_string(j), "data");
                  }
                }
                return ok;
              }),
              0);
    pid_t attacker = start_attacker_loop([&] {
      for (int i = 0; i < 50; ++i) {
        std::string d = t.job("d" + std::to_string(i));
        std::string moved = t.job("m" + std::to_string(i));
        if (::rename(d.c_str(), moved.c_str()) == 0) {
          ::symlink(t.victim.c_str(), d.c_str());
        }
      }
    });
    auto st = fs::remove_tree(t.base.get(), "job");
    stop_child(attacker);
    (void)st; // errors are allowed while the attacker races; escaping is not
    t.expect_victim_intact();
    ASSERT_TRUE(exists_nofollow(t.victim + "/sentinel")) << "round " << round;
    // Once the attacker is gone, a second pass finishes the job.
    ASSERT_TRUE(fs::remove_tree(t.base.get(), "job"));
    EXPECT_FALSE(exists_nofollow(t.job()));
  }
}

TEST(RemoveTree, DoesNotCrossATmpfsMountedInside)
{
  STAGEHAND_REQUIRE_ROOT();
  Tree t;
  ::mkdir(t.job("mnt").c_str(), 0755);
  if (::mount("none", t.job("mnt").c_str(), "tmpfs", 0, "size=1m") != 0) {
    GTEST_SKIP() << "SKIPPED LOUDLY: cannot mount tmpfs here (" << std::strerror(errno) << ")";
  }
  write_file(t.job("mnt/on_other_fs"), "keep me");
  write_file(t.job("plain"), "x");
  fs::RemoveStats stats;
  auto st = fs::remove_tree(t.base.get(), "job", &stats);
  EXPECT_FALSE(st);
  EXPECT_EQ(st.error().code, EXDEV);
  EXPECT_NE(st.error().message.find("job/mnt is a mount point: left in place"), std::string::npos) << st.error().message;
  EXPECT_EQ(stats.mounts_left, 1U);
  EXPECT_EQ(read_file(t.job("mnt/on_other_fs")), "keep me");
  EXPECT_FALSE(exists_nofollow(t.job("plain")));
  ASSERT_EQ(::umount(t.job("mnt").c_str()), 0);
  EXPECT_TRUE(fs::remove_tree(t.base.get(), "job"));
}

TEST(RemoveTree, DoesNotCrossABindMountOfTheSameFilesystem)
{
  STAGEHAND_REQUIRE_ROOT();
  Tree t;
  ::mkdir(t.job("bind").c_str(), 0755);
  if (::mount(t.victim.c_str(), t.job("bind").c_str(), nullptr, MS_BIND, nullptr) != 0) {
    GTEST_SKIP() << "SKIPPED LOUDLY: cannot bind-mount here (" << std::strerror(errno) << ")";
  }
  auto st = fs::remove_tree(t.base.get(), "job");
  EXPECT_FALSE(st);
  ::umount(t.job("bind").c_str());
  t.expect_victim_intact();
}

TEST(RemoveTree, DeepNestingBeyondPathMaxAndFdLimits)
{
  STAGEHAND_REQUIRE_ROOT();
  Tree t;
  // 3000 levels of 50-character names: ~150 KB of path, far beyond PATH_MAX and any fd budget.
  const std::string name(50, 'n');
  ASSERT_EQ(run_as_attacker([&] {
              UniqueFd cur(::open(t.job().c_str(), O_RDONLY | O_DIRECTORY));
              for (int i = 0; i < 3000; ++i) {
                if (::mkdirat(cur.get(), name.c_str(), 0700) != 0) {
                  return false;
                }
                UniqueFd next(::openat(cur.get(), name.c_str(), O_RDONLY | O_DIRECTORY));
                if (i % 500 == 0) {
                  ::close(::openat(next.get(), "f", O_CREAT | O_WRONLY, 0600));
                }
                cur = std::move(next);
              }
              return true;
            }),
            0);
  fs::RemoveStats stats;
  auto st = fs::remove_tree(t.base.get(), "job", &stats);
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_FALSE(exists_nofollow(t.job()));
  EXPECT_GE(stats.removed, 3000U);
}

TEST(RemoveTree, HundredThousandEntries)
{
  STAGEHAND_REQUIRE_ROOT();
  Tree t;
  ASSERT_EQ(run_as_attacker([&] {
              UniqueFd job(::open(t.job().c_str(), O_RDONLY | O_DIRECTORY));
              for (int d = 0; d < 100; ++d) {
                std::string dn = "dir" + std::to_string(d);
                if (::mkdirat(job.get(), dn.c_str(), 0755) != 0) {
                  return false;
                }
                UniqueFd dfd(::openat(job.get(), dn.c_str(), O_RDONLY | O_DIRECTORY));
                for (int f = 0; f < 1000; ++f) {
                  int fd = ::openat(dfd.get(), ("f" + std::to_string(f)).c_str(), O_CREAT | O_WRONLY, 0644);
                  if (fd < 0) {
                    return false;
                  }
                  ::close(fd);
                }
              }
              return true;
            }),
            0);
  fs::RemoveStats stats;
  ASSERT_TRUE(fs::remove_tree(t.base.get(), "job", &stats));
  EXPECT_EQ(stats.removed, 100U * 1000U + 100U + 1U);
  EXPECT_FALSE(exists_nofollow(t.job()));
}

TEST(RemoveTree, HardlinkToRootFileOnlyLosesTheLink)
{
  STAGEHAND_REQUIRE_ROOT();
  Tree t;
  // Root makes the link (protected_hardlinks stops the attacker); removal must unlink, not truncate.
  ASSERT_EQ(::link((t.victim + "/sentinel").c_str(), t.job("hard").c_str()), 0);
  ASSERT_TRUE(fs::remove_tree(t.base.get(), "job"));
  t.expect_victim_intact();
}

// A user's FUSE filesystem that never answers, mounted inside the tree: removal never asks it
// anything (no stat, no open on the mount point), leaves it, and says so.
TEST(RemoveTree, NeverAsksAHungFuseMountInside)
{
  STAGEHAND_REQUIRE_ROOT();
  Tree t;
  ::mkdir(t.job("fuse").c_str(), 0755);
  write_file(t.job("plain"), "x");
  HangingMount hang(t.job("fuse"));
  ASSERT_TRUE(hang.mounted()) << "hangfs did not mount (needs /dev/fuse, python3-fusepy, libfuse2)";
  auto said = run_with_watchdog(
    [&] {
      fs::RemoveStats stats;
      auto st = fs::remove_tree(t.base.get(), "job", &stats);
      return st ? std::string("removed") : std::to_string(stats.mounts_left) + " " + st.error().message;
    },
    std::chrono::seconds(60), [&] { hang.release(); });
  ASSERT_TRUE(said) << "remove_tree hung on a FUSE mount inside the tree";
  EXPECT_EQ(*said, "1 job/fuse is a mount point: left in place");
  EXPECT_FALSE(exists_nofollow(t.job("plain")));
  // A tree whose top is mounted over: left as well, and asked nothing.
  ::mkdir((t.dir / "job2").c_str(), 0700);
  HangingMount top(t.dir / "job2");
  ASSERT_TRUE(top.mounted());
  auto top_said = run_with_watchdog(
    [&] {
      auto st = fs::remove_tree(t.base.get(), "job2");
      return st ? std::string("removed") : st.error().message;
    },
    std::chrono::seconds(60), [&] { top.release(); });
  ASSERT_TRUE(top_said) << "remove_tree hung on a FUSE mount over the tree's top";
  EXPECT_EQ(*top_said, "job2 is a mount point: left in place");
}

// A btrfs subvolume has its own st_dev but sits on the same mount: it is the job's and goes with
// it (mount ids decide, not st_dev).
TEST(RemoveTree, RemovesABtrfsSubvolumeTheJobMade)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir dir;
  const std::string image = dir / "fs.img";
  const std::string fs_root = dir / "fs";
  ::mkdir(fs_root.c_str(), 0755);
  ASSERT_EQ(std::system(("truncate -s 200M '" + image + "' && mkfs.btrfs -q '" + image + "' >/dev/null && mount -o loop '" +
                         image + "' '" + fs_root + "'")
                          .c_str()),
            0)
    << "cannot make a btrfs image (needs btrfs-progs and a loop device)";
  struct Unmount
  {
    std::string path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{fs_root};
  ::mkdir((fs_root + "/job").c_str(), 0700);
  ASSERT_EQ(std::system(("btrfs -q subvolume create '" + fs_root + "/job/sv' && mkdir -p '" + fs_root +
                         "/job/sv/a/b' && echo x > '" + fs_root + "/job/sv/a/b/f' && chown -R 4242:4242 '" + fs_root +
                         "/job'")
                          .c_str()),
            0);
  struct stat job_st {}, sv_st {};
  ASSERT_EQ(::stat((fs_root + "/job").c_str(), &job_st), 0);
  ASSERT_EQ(::stat((fs_root + "/job/sv").c_str(), &sv_st), 0);
  ASSERT_NE(job_st.st_dev, sv_st.st_dev); // what made an st_dev comparison leave it behind
  UniqueFd base(::open(fs_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  fs::RemoveStats stats;
  auto st = fs::remove_tree(base.get(), "job", &stats);
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(stats.mounts_left, 0U);
  EXPECT_FALSE(exists_nofollow(fs_root + "/job"));
}
