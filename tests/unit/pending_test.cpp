// The daemon's persisted list of stage-outs still to finish, and what it does after each attempt.
#include "stagehand/stageout/pending.hpp"

#include <gtest/gtest.h>

using namespace stagehand;
using namespace stagehand::stageout;

TEST(PendingCopies, RoundTripAndRefuseWhatTheyCannotRead)
{
  const std::vector<PendingCopy> list = {
    {42, 1001, 1002, ".stageout.job_42.7", "ckpt:runs/42", "/home/alice/run", 1, "/scratch/%n"},
    {43, 1003, 1003, ".stageout.job_43.1", "out", "/home/bob", 0},
  };
  auto back = from_json(to_json(list));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(*back, list);
  EXPECT_TRUE(from_json(to_json({}))->empty());
  EXPECT_FALSE(from_json("not json"));
  EXPECT_FALSE(from_json(R"({"version":1,"pending":[{"job_id":"x"}]})"));
  EXPECT_FALSE(from_json(R"({"version":1,"pending":[{"job_id":1,"uid":1,"gid":1,"dir":".stageout.job_1.1"}]})"));
}

TEST(PendingCopies, DoneKeptAfterThreeFailedAttemptsElseRetried)
{
  EXPECT_EQ(after_attempt(true, 1), AfterAttempt::done);
  EXPECT_EQ(after_attempt(true, 3), AfterAttempt::done);
  EXPECT_EQ(after_attempt(false, 1), AfterAttempt::retry);
  EXPECT_EQ(after_attempt(false, 2), AfterAttempt::retry);
  EXPECT_EQ(after_attempt(false, 3), AfterAttempt::keep_results); // never deleted because a copy failed
  EXPECT_EQ(after_attempt(false, 7), AfterAttempt::keep_results); // a list from before a restart
  EXPECT_EQ(k_max_attempts, 3U);
}
