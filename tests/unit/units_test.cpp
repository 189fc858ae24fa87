// Sizes and durations as written in stagehand.toml.
#include "stagehand/util/strings.hpp"
#include "stagehand/util/units.hpp"

#include <gtest/gtest.h>

using namespace stagehand;

TEST(ParseSize, SuffixesArePowersOf1024)
{
  EXPECT_EQ(*parse_size("0"), 0U);
  EXPECT_EQ(*parse_size("123"), 123U);
  EXPECT_EQ(*parse_size("4K"), 4096U);
  EXPECT_EQ(*parse_size("2M"), 2U << 20);
  EXPECT_EQ(*parse_size("500G"), 500ULL << 30);
  EXPECT_EQ(*parse_size("2T"), 2ULL << 40);
  EXPECT_EQ(*parse_size("2TB"), 2ULL << 40);
  EXPECT_EQ(*parse_size("2TiB"), 2ULL << 40);
  EXPECT_EQ(*parse_size("1g"), 1ULL << 30);
}

TEST(ParseSize, RejectsGarbageAndOverflow)
{
  EXPECT_FALSE(parse_size(""));
  EXPECT_FALSE(parse_size("G"));
  EXPECT_FALSE(parse_size("12X"));
  EXPECT_FALSE(parse_size("-1"));
  EXPECT_FALSE(parse_size("1.5G"));
  EXPECT_FALSE(parse_size("99999999999T"));
  EXPECT_NE(parse_size("12X").error().message.find("12X"), std::string::npos);
}

TEST(ParseDuration, Suffixes)
{
  EXPECT_EQ(parse_duration("30")->count(), 30);
  EXPECT_EQ(parse_duration("30s")->count(), 30);
  EXPECT_EQ(parse_duration("5m")->count(), 300);
  EXPECT_EQ(parse_duration("24h")->count(), 86400);
  EXPECT_EQ(parse_duration("2d")->count(), 172800);
  // Longer than 100 years counts as 100 years: a deadline that far on overflows nothing.
  EXPECT_EQ(parse_duration("36500d")->count(), 36500LL * 86400);
  EXPECT_EQ(parse_duration("1000000d")->count(), 36500LL * 86400);
}

TEST(ParseDuration, RejectsGarbage)
{
  EXPECT_FALSE(parse_duration("24x"));
  EXPECT_FALSE(parse_duration("h"));
  EXPECT_FALSE(parse_duration("1hh"));
  EXPECT_FALSE(parse_duration("99999999999999999d"));
}

TEST(Split, KeepsEmptyPieces)
{
  using V = std::vector<std::string_view>;
  EXPECT_EQ(split("a,,b", ','), (V{"a", "", "b"}));
  EXPECT_EQ(split("", ','), (V{""}));
  EXPECT_EQ(split("/x/", '/'), (V{"", "x", ""}));
  EXPECT_EQ(split("abc", ','), (V{"abc"}));
}
