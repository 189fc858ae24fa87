// $SLURM_TMPDIR/.stagehand (stage/state_dir.hpp): the lock a job's tasks on a node stage under, and
// the markers that tell the later ones the outcome.
#include "stagehand/stage/request.hpp"
#include "stagehand/stage/state_dir.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

using namespace stagehand;
using stagehand::test::TempDir;

TEST(StateDir, MadeOnceForTheUserAloneWithItsMarkers)
{
  TempDir dir;
  {
    auto locked = stage::lock_state_dir(dir.path());
    ASSERT_TRUE(locked) << locked.error().message;
    struct stat st {};
    ASSERT_EQ(::fstat(locked->state.get(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0700U);
    EXPECT_FALSE(stage::has_marker(locked->state.get(), "done-x"));
    stage::write_marker(locked->state.get(), "done-x", "");
    EXPECT_TRUE(stage::has_marker(locked->state.get(), "done-x"));
  }
  auto again = stage::lock_state_dir(dir.path()); // made already: opened as it is
  ASSERT_TRUE(again);
  EXPECT_TRUE(stage::has_marker(again->state.get(), "done-x"));
}

TEST(StateDir, ASecondTaskWaitsForTheFirstsLock)
{
  TempDir dir;
  auto first = stage::lock_state_dir(dir.path());
  ASSERT_TRUE(first);
  std::atomic<bool> got{false};
  std::thread second([&] {
    auto mine = stage::lock_state_dir(dir.path());
    got = static_cast<bool>(mine);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(got.load()); // held by the first
  first->lock.reset();
  second.join();
  EXPECT_TRUE(got.load());
}

TEST(StateDir, NeverThroughASymlink)
{
  TempDir dir;
  ASSERT_EQ(::mkdir((dir.path() + "/real").c_str(), 0700), 0);
  ASSERT_EQ(::symlink("real", (dir.path() + "/link").c_str()), 0);
  auto through = stage::lock_state_dir(dir.path() + "/link");
  ASSERT_FALSE(through);
  EXPECT_NE(through.error().message.find("no scratch directory"), std::string::npos);
  ASSERT_EQ(::mkdir((dir.path() + "/j").c_str(), 0700), 0);
  ASSERT_EQ(::symlink("../real", (dir.path() + "/j/" + stage::k_state_dir).c_str()), 0);
  EXPECT_FALSE(stage::lock_state_dir(dir.path() + "/j")); // .stagehand a symlink: refused
}
