// Progress on long staging: the line users read, the record stagehandd reads (and what it refuses
// to believe), and the board's bytes done taken from the source's own offset.
#include "stagehand/stage/progress.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

using namespace stagehand;
using namespace stagehand::stage;

TEST(Progress, LineHasPercentBytesRateAndTimeLeft)
{
  const std::string line = progress_text(proto::Progress{"/shared/big.tar", 32ULL << 20, 128ULL << 20, 8.0});
  EXPECT_EQ(line, "staging /shared/big.tar: 25%, 32.0 MiB of 128.0 MiB, 4.0 MiB/s, 24 s left");
}

TEST(Progress, UnknownTotalOrNothingReadYetStillSaysSomethingTrue)
{
  EXPECT_EQ(progress_text(proto::Progress{"/d/tree", 0, 0, 31.2}), "staging /d/tree: 31 s so far, size unknown");
  EXPECT_EQ(progress_text(proto::Progress{"/a.tar", 0, 100, 30.0}),
            "staging /a.tar: 0%, 0 B of 100 B, 0 B/s, time left unknown");
  // A file that grew past its size at open never reads above 100%, nor claims to be done.
  EXPECT_EQ(progress_text(proto::Progress{"/a", 200, 100, 1.0}),
            "staging /a: 100%, 100 B of 100 B, 200 B/s, time left unknown");
  EXPECT_EQ(progress_text(proto::Progress{"/a", 100, 100, 1.0}), "staging /a: 100%, 100 B of 100 B, 100 B/s, 0 s left");
}

TEST(Progress, RecordRoundTripsAndGarbageIsRefused)
{
  const proto::Progress p{"/data/x \"quoted\".tar", 5, 10, 1.5};
  auto back = parse_progress_record(progress_record(p));
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->source, p.source);
  EXPECT_EQ(back->done_bytes, 5U);
  EXPECT_EQ(back->total_bytes, 10U);
  EXPECT_DOUBLE_EQ(back->seconds, 1.5);
  for (const char* bad : {"", "[]", "{}", "{\"source\":1,\"done_bytes\":1,\"total_bytes\":1,\"seconds\":1}",
                          "{\"source\":\"a\",\"done_bytes\":-1,\"total_bytes\":1,\"seconds\":1}",
                          "{\"source\":\"a\",\"done_bytes\":1,\"total_bytes\":1,\"seconds\":-1}"}) {
    EXPECT_FALSE(parse_progress_record(bad)) << bad;
  }
  EXPECT_FALSE(parse_progress_record(std::string(k_max_progress_record + 1, ' ')));
}

TEST(Progress, BoardCountsTheSourceOffset)
{
  test::TempDir dir;
  const std::string path = dir.path() + "/f";
  std::ofstream(path) << std::string(1000, 'x');
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ProgressBoard board;
  EXPECT_FALSE(board.snapshot());
  {
    ProgressScope scope(&board, "/f", fd, 1000);
    char buf[300];
    ASSERT_EQ(::read(fd, buf, sizeof buf), 300);
    auto p = board.snapshot();
    ASSERT_TRUE(p);
    EXPECT_EQ(p->source, "/f");
    EXPECT_EQ(p->done_bytes, 300U);
    EXPECT_EQ(p->total_bytes, 1000U);
  }
  EXPECT_FALSE(board.snapshot()); // between sources: nothing
  ::close(fd);
  // A delivery being written elsewhere: its size is the bytes done.
  board.begin("/g", [] { return std::uint64_t{700}; }, 1000);
  auto p = board.snapshot();
  ASSERT_TRUE(p);
  EXPECT_EQ(p->done_bytes, 700U);
  board.end();
}

TEST(Progress, RecordReaderTakesOnlyAFreshRegularFileBeneathTheJob)
{
  test::TempDir dir;
  const std::string state = dir.path() + "/.stagehand";
  ASSERT_EQ(::mkdir(state.c_str(), 0700), 0);
  int job = ::open(dir.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(job, 0);
  EXPECT_FALSE(read_progress_record(job)); // none
  const std::string rec = state + "/progress";
  std::ofstream(rec) << progress_record(proto::Progress{"/a.tar", 1, 2, 3});
  auto p = read_progress_record(job);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->source, "/a.tar");
  // Stale: the staging that wrote it is gone.
  struct timespec old[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, rec.c_str(), old, 0), 0);
  EXPECT_FALSE(read_progress_record(job));
  // A symlink to a file root may read, and a FIFO that would hang the daemon, are refused.
  ASSERT_EQ(::unlink(rec.c_str()), 0);
  ASSERT_EQ(::symlink("/etc/passwd", rec.c_str()), 0);
  EXPECT_FALSE(read_progress_record(job));
  ASSERT_EQ(::unlink(rec.c_str()), 0);
  ASSERT_EQ(::mkfifo(rec.c_str(), 0600), 0);
  EXPECT_FALSE(read_progress_record(job));
  ::close(job);
}
