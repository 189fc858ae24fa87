// stagehandd's metrics file: root writes it only through a directory no user controls.
#include "stagehand/service/metrics.hpp"

#include "test_support.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

using namespace stagehand;
using namespace stagehand::test;

TEST(Metrics, WrittenInARootOwnedDirectory)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir d;
  ::chmod(d.path().c_str(), 0755);
  ::mkdir((d / "prom").c_str(), 0755);
  service::MetricsSnapshot m;
  m.node = "n1";
  m.cache_entries = 3;
  ASSERT_TRUE(service::write_metrics_file(d / "prom/stagehand.prom", m));
  EXPECT_NE(read_file(d / "prom/stagehand.prom").find("stagehand_cache_entries{node=\"n1\"} 3"), std::string::npos);
}

TEST(Metrics, ADirectoryAUserControlsIsRefused)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir d;
  ::chmod(d.path().c_str(), 0755);
  service::MetricsSnapshot m;
  m.node = "n1";
  // The user's own directory: they could swap the file's name for a link to anywhere.
  ::mkdir((d / "users").c_str(), 0755);
  ASSERT_EQ(::chown((d / "users").c_str(), k_attacker_uid, k_attacker_gid), 0);
  auto owned = service::write_metrics_file(d / "users/stagehand.prom", m);
  ASSERT_FALSE(owned);
  EXPECT_NE(owned.error().message.find("metrics_file"), std::string::npos) << owned.error().message;
  EXPECT_FALSE(exists_nofollow(d / "users/stagehand.prom"));
  // A symlink of theirs on the way to a root-owned directory.
  ::mkdir((d / "root").c_str(), 0755);
  ASSERT_EQ(::symlink((d / "root").c_str(), (d / "link").c_str()), 0);
  ASSERT_EQ(::lchown((d / "link").c_str(), k_attacker_uid, k_attacker_gid), 0);
  EXPECT_FALSE(service::write_metrics_file(d / "link/stagehand.prom", m));
  EXPECT_FALSE(exists_nofollow(d / "root/stagehand.prom"));
  // Writable by others.
  ::mkdir((d / "open").c_str(), 0777);
  ::chmod((d / "open").c_str(), 0777);
  EXPECT_FALSE(service::write_metrics_file(d / "open/stagehand.prom", m));
}
