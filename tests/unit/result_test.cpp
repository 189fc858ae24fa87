// Errors as values: kinds by name (as they cross the daemon's socket), context added once.
#include "stagehand/util/result.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

using namespace stagehand;

TEST(Error, EveryKindRoundTripsByName)
{
  std::set<std::string> names;
  for (ErrorKind k : k_error_kinds) {
    names.insert(kind_name(k));
    EXPECT_EQ(kind_from_name(kind_name(k)), k);
  }
  EXPECT_EQ(names.size(), std::size(k_error_kinds));
  EXPECT_FALSE(kind_from_name("invalid"));
}

TEST(Error, ContextIsAddedOnce)
{
  Error e = Error::limit("more than 1000 bytes (limit)");
  Error named = e.with_context("data/plain.bin").with_context("data/plain.bin").with_context("--stage-data");
  EXPECT_EQ(named.message, "--stage-data: data/plain.bin: more than 1000 bytes (limit)");
  EXPECT_EQ(named.kind, ErrorKind::limit);
  EXPECT_EQ(Error::corrupt("x").kind, ErrorKind::corrupt);
  EXPECT_EQ(Error::from_errno("cannot write f", ENOSPC).message, "cannot write f: No space left on device");
}
