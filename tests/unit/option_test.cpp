// --tmpdir[=keep] values.
#include "stagehand/tmpdir/option.hpp"

#include <gtest/gtest.h>

using namespace stagehand::tmpdir;

TEST(TmpdirOption, Values)
{
  EXPECT_EQ(*parse_option(nullptr), Request::create);
  EXPECT_EQ(*parse_option(""), Request::create);
  EXPECT_EQ(*parse_option("(null)"), Request::create); // how Slurm passes "no value" to the prolog
  EXPECT_EQ(*parse_option("keep"), Request::keep);
  auto bad = parse_option("kep");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().message, "--tmpdir: unknown value \"kep\" (expected no value, or --tmpdir=keep)");
}
