// The stagings status lists: a user sees their own only, root all; a finished one is gone.
#include "stagehand/service/stagings.hpp"

#include <gtest/gtest.h>

using namespace stagehand;
using Viewer = service::Stagings::Viewer;

namespace {
proto::Progress progress(const std::string& shown, std::uint64_t done)
{
  proto::Progress p;
  p.source = shown;
  p.done_bytes = done;
  return p;
}
} // namespace

TEST(Stagings, AUserSeesTheirOwnAndRootSeesAll)
{
  service::Stagings stagings;
  const auto alice = stagings.open(1001);
  const auto bob = stagings.open(1002);
  EXPECT_NE(alice, 0u);
  EXPECT_NE(alice, bob);
  stagings.report(alice, progress("alice.tar", 10));
  stagings.report(bob, progress("bob.tar", 20));
  auto seen = stagings.seen_by(Viewer::user, 1001);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].source, "alice.tar");
  EXPECT_EQ(seen[0].done_bytes, 10u);
  EXPECT_EQ(stagings.seen_by(Viewer::root, 0).size(), 2u);
  EXPECT_TRUE(stagings.seen_by(Viewer::user, 1003).empty());
}

TEST(Stagings, ListedFromItsFirstReportUntilItCloses)
{
  service::Stagings stagings;
  const auto id = stagings.open(1001);
  EXPECT_TRUE(stagings.seen_by(Viewer::root, 0).empty()); // nothing to show yet
  stagings.report(id, progress("a.tar", 1));
  stagings.report(id, progress("a.tar", 5));
  auto seen = stagings.seen_by(Viewer::root, 0);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].done_bytes, 5u); // the latest
  stagings.close(id);
  EXPECT_TRUE(stagings.seen_by(Viewer::root, 0).empty());
  stagings.report(id, progress("a.tar", 9)); // a late report of a closed staging lists nothing
  EXPECT_TRUE(stagings.seen_by(Viewer::root, 0).empty());
}
