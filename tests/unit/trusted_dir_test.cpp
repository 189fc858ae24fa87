// open_trusted_dir: a user can never redirect where root creates job directories.
#include "stagehand/fs/trusted_dir.hpp"

#include "test_support.hpp"

#include <sys/stat.h>
#include <unistd.h>

using namespace stagehand;
using namespace stagehand::test;

TEST(TrustedDir, CreatesMissingComponentsRootOwned0755)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir dir;
  auto r = fs::open_trusted_dir(dir / "a/b/c", fs::CreateMissing::yes);
  ASSERT_TRUE(r) << r.error().message;
  struct stat st {};
  ASSERT_EQ(::stat((dir / "a/b/c").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0U);
  EXPECT_EQ(st.st_mode & 07777, 0755U);
  EXPECT_FALSE(fs::open_trusted_dir(dir / "missing", fs::CreateMissing::no));
}

TEST(TrustedDir, RefusesUserOwnedComponent)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir dir;
  ::mkdir((dir / "user").c_str(), 0755);
  ::chown((dir / "user").c_str(), k_attacker_uid, k_attacker_gid);
  auto r = fs::open_trusted_dir(dir / "user/base", fs::CreateMissing::yes);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("is owned by uid 4242, not root"), std::string::npos) << r.error().message;
  EXPECT_FALSE(exists_nofollow(dir / "user/base"));
}

TEST(TrustedDir, RefusesUserPlantedSymlinkInStickyDir)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir dir;
  ::mkdir((dir / "tmp").c_str(), 01777);
  ::chmod((dir / "tmp").c_str(), 01777);
  ::mkdir((dir / "etc").c_str(), 0755);
  // The attacker plants tmp/stagehand -> etc before the base was ever created.
  ASSERT_EQ(run_as_attacker([&] { return ::symlink((dir / "etc").c_str(), (dir / "tmp/stagehand").c_str()) == 0; }), 0);
  auto r = fs::open_trusted_dir(dir / "tmp/stagehand", fs::CreateMissing::yes);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("is not owned by root"), std::string::npos) << r.error().message;
}

TEST(TrustedDir, FollowsRootOwnedSymlink)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir dir;
  ::mkdir((dir / "real").c_str(), 0755);
  ASSERT_EQ(::symlink("real", (dir / "link").c_str()), 0);
  auto r = fs::open_trusted_dir(dir / "link/base", fs::CreateMissing::yes);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(exists_nofollow(dir / "real/base"));
}

TEST(TrustedDir, RefusesWritableFinalDirectory)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir dir;
  ::mkdir((dir / "open").c_str(), 0777);
  ::chmod((dir / "open").c_str(), 0777);
  auto r = fs::open_trusted_dir(dir / "open", fs::CreateMissing::no);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("writable by group or others"), std::string::npos);
}

TEST(TrustedDir, RefusesRelativeAndDotDot)
{
  EXPECT_FALSE(fs::open_trusted_dir("relative", fs::CreateMissing::no));
  EXPECT_FALSE(fs::open_trusted_dir("/tmp/../etc", fs::CreateMissing::no));
}

// A parent others can write (without the sticky bit) lets them rename the base away and put their
// own in its place: refused, naming the directory, and nothing is created under it.
TEST(TrustedDir, RefusesAParentOthersCanWrite)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir dir;
  ::mkdir((dir / "open").c_str(), 0777);
  ::chmod((dir / "open").c_str(), 0777);
  auto r = fs::open_trusted_dir(dir / "open/scratch/base", fs::CreateMissing::yes);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().kind, ErrorKind::refused);
  EXPECT_NE(r.error().message.find(dir / "open/scratch/base: refused: " + dir.path() + "/open is writable by others"),
            std::string::npos)
    << r.error().message;
  EXPECT_FALSE(exists_nofollow(dir / "open/scratch"));
  // Writable by a group other than root's: the same.
  ::mkdir((dir / "group").c_str(), 0775);
  ::chmod((dir / "group").c_str(), 0775);
  ::chown((dir / "group").c_str(), 0, k_attacker_gid);
  auto g = fs::open_trusted_dir(dir / "group/base", fs::CreateMissing::yes);
  ASSERT_FALSE(g);
  EXPECT_NE(g.error().message.find(dir.path() + "/group is writable by others"), std::string::npos) << g.error().message;
  // Sticky (like /tmp): others cannot rename root's entries, so it may be a parent.
  ::mkdir((dir / "sticky").c_str(), 01777);
  ::chmod((dir / "sticky").c_str(), 01777);
  auto s = fs::open_trusted_dir(dir / "sticky/base", fs::CreateMissing::yes);
  EXPECT_TRUE(s) << s.error().message;
}

// The parent reached through a root-owned symlink is checked too.
TEST(TrustedDir, ChecksTheParentsASymlinkLeadsTo)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir dir;
  ::mkdir((dir / "open").c_str(), 0777);
  ::chmod((dir / "open").c_str(), 0777);
  ASSERT_EQ(::symlink((dir / "open").c_str(), (dir / "link").c_str()), 0);
  auto r = fs::open_trusted_dir(dir / "link/base", fs::CreateMissing::yes);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find(dir.path() + "/open is writable by others"), std::string::npos) << r.error().message;
}
