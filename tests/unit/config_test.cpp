// Config rules: defaults, every key, and errors that name file, line and key.
#include "stagehand/config/config.hpp"

#include "test_support.hpp"

#include <sys/stat.h>
#include <unistd.h>

using namespace stagehand;
using stagehand::test::TempDir;

namespace {

std::string error_of(std::string_view text)
{
  auto r = parse_config(text, "/etc/slurm/stagehand.toml");
  EXPECT_FALSE(r) << "expected an error for:\n" << text;
  return r ? std::string() : r.error().message;
}

} // namespace

TEST(Config, EmptyFileGivesSpecDefaults)
{
  auto c = parse_config("", "x.toml");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->tmpdir.base, "/local/stagehand");
  EXPECT_FALSE(c->tmpdir.by_default);
  EXPECT_TRUE(c->tmpdir.export_tmpdir);
  EXPECT_EQ(c->tmpdir.keep_for.count(), 86400);
  EXPECT_EQ(c->stage.max_bytes, 2ULL << 40);
  EXPECT_TRUE(c->stage.allowed_roots.empty());
  EXPECT_EQ(c->ddp.port_min, 20000);
  EXPECT_EQ(c->ddp.port_max, 32767);
  EXPECT_EQ(c->ddp.master_addr, "{host}");
  EXPECT_EQ(c->daemon.socket, "/run/stagehand/stagehandd.sock");
  EXPECT_EQ(c->daemon.cache_max_bytes, 500ULL << 30);
  EXPECT_EQ(c->daemon.gc_interval.count(), 300);
}

TEST(Config, EveryKeyIsRead)
{
  auto c = parse_config(R"(
[tmpdir]
base = "/scratch/sh/%n"
default = true
export_tmpdir = false
keep_for = "2h"
[stage]
max_bytes = "10G"
allowed_roots = ["/datasets", "/home"]
[ddp]
port_min = 30000
port_max = 31000
master_addr = "{host}-ib"
[ddp.env]
NCCL_SOCKET_IFNAME = "ib0"
NCCL_DEBUG = "WARN"
[daemon]
socket = "/run/sh.sock"
state_dir = "/var/lib/sh"
cache_dir = "/local/cache"
cache_max_bytes = 1024
gc_interval = 60
)",
                        "x.toml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->tmpdir.base, "/scratch/sh/%n");
  EXPECT_TRUE(c->tmpdir.by_default);
  EXPECT_FALSE(c->tmpdir.export_tmpdir);
  EXPECT_EQ(c->tmpdir.keep_for.count(), 7200);
  EXPECT_EQ(c->stage.max_bytes, 10ULL << 30);
  ASSERT_EQ(c->stage.allowed_roots.size(), 2U);
  EXPECT_EQ(c->stage.allowed_roots[1], "/home");
  EXPECT_EQ(c->ddp.port_min, 30000);
  EXPECT_EQ(c->ddp.master_addr, "{host}-ib");
  ASSERT_EQ(c->ddp.env.size(), 2U);
  EXPECT_EQ(c->ddp.env[1].first, "NCCL_SOCKET_IFNAME"); // sorted by name
  EXPECT_EQ(c->ddp.env[1].second, "ib0");
  EXPECT_EQ(c->daemon.cache_max_bytes, 1024U);
  EXPECT_EQ(c->daemon.gc_interval.count(), 60);
}

// A gc_interval of 0 would collect without a pause (asking slurmctld each time): it counts as 1 s.
// A duration past 100 years counts as 100 years (a deadline that far on overflowed): configs that
// loaded before still load.
TEST(Config, DurationsAreBoundedNotRefused)
{
  auto c = parse_config("[daemon]\ngc_interval = 0\n[tmpdir]\nkeep_for = \"99999d\"\n[stage]\nout_budget = 9999999999999\n",
                        "x.toml");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->daemon.gc_interval.count(), 1);
  EXPECT_EQ(c->tmpdir.keep_for.count(), 36500LL * 86400);
  EXPECT_EQ(c->stage.out_budget.count(), 36500LL * 86400);
}

TEST(Config, UnknownKeyNamesFileLineAndKey)
{
  auto msg = error_of("[tmpdir]\nbase = \"/x\"\nkeep_four = \"1h\"\n");
  EXPECT_EQ(msg, "/etc/slurm/stagehand.toml:3: [tmpdir] keep_four: unknown key");
}

TEST(Config, UnknownTableIsAnError)
{
  EXPECT_NE(error_of("[tmpdirs]\nbase = \"/x\"\n").find(":1: tmpdirs: unknown key"), std::string::npos);
}

TEST(Config, WrongTypeNamesExpectedType)
{
  auto msg = error_of("[tmpdir]\ndefault = \"yes\"\n");
  EXPECT_NE(msg.find(":2: [tmpdir] default: expected true or false, got string"), std::string::npos) << msg;
  msg = error_of("[ddp]\nport_min = \"20000\"\n");
  EXPECT_NE(msg.find(":2: [ddp] port_min: expected an integer"), std::string::npos) << msg;
}

TEST(Config, BadSizeAndDuration)
{
  auto msg = error_of("[stage]\nmax_bytes = \"2X\"\n");
  EXPECT_NE(msg.find(":2: [stage] max_bytes: bad size \"2X\""), std::string::npos) << msg;
  msg = error_of("\n[tmpdir]\nkeep_for = \"1 week\"\n");
  EXPECT_NE(msg.find(":3: [tmpdir] keep_for: bad duration"), std::string::npos) << msg;
  msg = error_of("[daemon]\ncache_max_bytes = -5\n");
  EXPECT_NE(msg.find("[daemon] cache_max_bytes: size must not be negative"), std::string::npos) << msg;
}

TEST(Config, BadValues)
{
  EXPECT_NE(error_of("[tmpdir]\nbase = \"relative/dir\"\n").find("[tmpdir] base: \"relative/dir\" is not an absolute path"),
            std::string::npos);
  EXPECT_NE(error_of("[ddp]\nport_min = 70000\n").find("[ddp] port_min: 70000 is not a port number"), std::string::npos);
  EXPECT_NE(error_of("[ddp]\nport_min = 3000\nport_max = 2000\n").find("port_min 3000 is above port_max 2000"),
            std::string::npos);
  EXPECT_NE(error_of("[ddp]\nmaster_addr = \"node-ib\"\n").find("does not contain {host}"), std::string::npos);
  EXPECT_NE(error_of("[ddp.env]\n\"BAD-NAME\" = \"x\"\n").find("[ddp.env] BAD-NAME: not a valid environment"),
            std::string::npos);
  EXPECT_NE(error_of("[ddp.env]\nNCCL_X = 3\n").find("[ddp.env] NCCL_X: expected a string"), std::string::npos);
  EXPECT_NE(error_of("[stage]\nallowed_roots = [\"data\"]\n").find("[stage] allowed_roots: \"data\" is not an absolute"),
            std::string::npos);
}

TEST(Config, TomlSyntaxErrorNamesLine)
{
  auto msg = error_of("[tmpdir]\nbase = \n");
  EXPECT_EQ(msg.rfind("/etc/slurm/stagehand.toml:2: ", 0), 0U) << msg;
}

TEST(Config, ExpandNode)
{
  EXPECT_EQ(expand_node("/local/%n/x", "node1"), "/local/node1/x");
  EXPECT_EQ(expand_node("/a/%n-%n", "n"), "/a/n-n");
  EXPECT_EQ(expand_node("/a/100%%", "n"), "/a/100%");
  EXPECT_EQ(expand_node("/a/%x%", "n"), "/a/%x%");
}

TEST(ConfigFile, LoadsRootOwnedFile)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir dir;
  test::write_file(dir / "c.toml", "[tmpdir]\nbase = \"/x\"\n");
  ::chmod((dir / "c.toml").c_str(), 0644);
  auto c = load_config(dir / "c.toml", OwnerCheck::require_root_owned);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->tmpdir.base, "/x");
  EXPECT_EQ(c->source, dir / "c.toml");
}

TEST(ConfigFile, RefusesFileNotOwnedByRoot)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir dir;
  test::write_file(dir / "c.toml", "");
  ASSERT_EQ(::chown((dir / "c.toml").c_str(), test::k_attacker_uid, test::k_attacker_gid), 0);
  auto c = load_config(dir / "c.toml", OwnerCheck::require_root_owned);
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("owned by uid 4242, must be owned by root"), std::string::npos);
  EXPECT_TRUE(load_config(dir / "c.toml", OwnerCheck::skip));
}

TEST(ConfigFile, RefusesGroupOrWorldWritable)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir dir;
  test::write_file(dir / "c.toml", "");
  for (mode_t mode : {0664, 0646}) {
    ::chmod((dir / "c.toml").c_str(), mode);
    auto c = load_config(dir / "c.toml", OwnerCheck::require_root_owned);
    ASSERT_FALSE(c);
    EXPECT_NE(c.error().message.find("writable by group or others"), std::string::npos);
  }
}

TEST(ConfigFile, RefusesSymlinkAndMissingFile)
{
  TempDir dir;
  test::write_file(dir / "real.toml", "");
  ASSERT_EQ(::symlink((dir / "real.toml").c_str(), (dir / "link.toml").c_str()), 0);
  EXPECT_FALSE(load_config(dir / "link.toml", OwnerCheck::skip));
  auto missing = load_config(dir / "nope.toml", OwnerCheck::skip);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("nope.toml: No such file or directory"), std::string::npos);
}

// Found by tests/fuzz/config_fuzz.cpp: toml++ 3.3 reaches __builtin_unreachable on U+0483 after a
// table name, and on U+045C after a line-ending backslash in a multi-line string. Non-ASCII
// characters are refused before toml++ sees them, with the line and column, except in whole-line
// comments (the shipped config has one).
TEST(Config, NonAsciiIsRefusedBeforeTheParserExceptInCommentLines)
{
  auto bad = stagehand::parse_config("[ddp\xd2\x83nv\n# Every key\n", "site.toml");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "site.toml:1:5: a non-ASCII character (allowed only in whole-line # comments)");
  auto in_string = stagehand::parse_config("[tmpdir]\nbase = \"/scratch/\xc3\xa9t\xc3\xa9/%n\"\n", "site.toml");
  ASSERT_FALSE(in_string);
  EXPECT_EQ(in_string.error().message.rfind("site.toml:2:18: ", 0), 0U) << in_string.error().message;
  auto multiline = stagehand::parse_config("[\"\"\"dir\\\nbase = #/loco 10dir\\\n# \xd1\x9coco 1]\n", "site.toml");
  ASSERT_FALSE(multiline);
  EXPECT_EQ(multiline.error().message.rfind("site.toml:3:3: ", 0), 0U) << multiline.error().message;
  auto good = stagehand::parse_config("# caf\xc3\xa9 \xe2\x80\x94 ok\n  # \xc3\xa9\n[tmpdir]\nbase = \"/scratch/%n\"\n", "site.toml");
  ASSERT_TRUE(good) << good.error().message;
  EXPECT_EQ(good->tmpdir.base, "/scratch/%n");
}
