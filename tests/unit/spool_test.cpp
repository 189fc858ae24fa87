// The one read of a cache miss: the job's pipe and the spool each get every byte of the source,
// and the spool gives way (never the job) when it cannot take them.
#include "stagehand/cache/spool.hpp"
#include "stagehand/util/fd.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <future>
#include <random>
#include <string>
#include <thread>

using namespace stagehand;

namespace {

std::string random_bytes(std::size_t n)
{
  std::mt19937 rng(42);
  std::string s(n, '\0');
  for (auto& c : s) {
    c = static_cast<char>(rng());
  }
  return s;
}

std::string read_to_end(int fd, std::size_t stop_after = std::string::npos)
{
  std::string out;
  char buf[65536];
  for (;;) {
    const std::size_t want = std::min(sizeof buf, stop_after - out.size());
    if (want == 0) {
      return out;
    }
    const ssize_t n = ::read(fd, buf, want);
    if (n <= 0) {
      return out;
    }
    out.append(buf, static_cast<std::size_t>(n));
  }
}

UniqueFd memory_file(const std::string& content)
{
  UniqueFd fd(::memfd_create("source", MFD_CLOEXEC));
  EXPECT_EQ(::write(fd.get(), content.data(), content.size()), static_cast<ssize_t>(content.size()));
  ::lseek(fd.get(), 0, SEEK_SET);
  return fd;
}

struct Run
{
  Result<cache::TeeResult> result = Error::internal("not run");
  std::string delivered;
  std::string spooled;
  int read_overs = 0;
  off_t spooled_at_read_over = -1; // the spool's size when the read was said to be over
};

// A lane for tee_source as make_lane gives it for `source_bytes` (0: none); the test keeps the
// writer's end.
struct TestLane
{
  explicit TestLane(std::size_t source_bytes)
  {
    if (source_bytes == 0) {
      return;
    }
    auto made = cache::make_lane(source_bytes);
    EXPECT_TRUE(made);
    if (made) {
      size = made->bytes;
      rd = std::move(made->rd);
      wr = made->wr.release();
    }
  }
  cache::SpoolLane lane() const { return cache::SpoolLane{rd.get(), wr, nullptr}; }
  UniqueFd rd;
  int wr = -1; // tee_source closes it
  std::size_t size = 0;
};

// What make_lane gives a source of 64 MiB: at most fs.pipe-max-size (1 MiB by default).
std::size_t lane_size()
{
  static const std::size_t size = TestLane(64 << 20).size;
  return size;
}

// Tees `in` (a file, or a pipe fed with `content` when `as_pipe`) with a reader on the delivery
// that stops after `read_only` bytes (closing its end early, as an extractor that saw the
// archive's end does).
Run tee(const std::string& content, bool as_pipe, cache::SpoolPolicy policy, bool spool,
        std::size_t read_only = std::string::npos, std::size_t lane_bytes = 0)
{
  TestLane lane(lane_bytes);
  Run run;
  UniqueFd spool_fd(spool ? ::memfd_create("spool", MFD_CLOEXEC) : -1);
  int d[2];
  EXPECT_EQ(::pipe2(d, O_CLOEXEC), 0);
  UniqueFd deliver_rd(d[0]);
  UniqueFd deliver_wr(d[1]);
  auto reader = std::async(std::launch::async, [&] {
    std::string got = read_to_end(deliver_rd.get(), read_only);
    deliver_rd.reset();
    return got;
  });
  UniqueFd source;
  std::future<void> feeder;
  if (as_pipe) {
    int p[2];
    EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
    source = UniqueFd(p[0]);
    // A source that fits a pipe is in it whole before the read starts (whole pages); a larger one
    // comes while it is read, in pieces.
    if (::fcntl(p[1], F_SETPIPE_SZ, 1 << 20) >= static_cast<int>(content.size()) + 4096) {
      EXPECT_EQ(::write(p[1], content.data(), content.size()), static_cast<ssize_t>(content.size()));
      ::close(p[1]);
    } else {
      feeder = std::async(std::launch::async, [wr = p[1], &content] {
        std::size_t at = 0;
        while (at < content.size()) {
          const ssize_t n = ::write(wr, content.data() + at, std::min<std::size_t>(100000, content.size() - at));
          if (n <= 0) {
            break;
          }
          at += static_cast<std::size_t>(n);
        }
        ::close(wr);
      });
    }
  } else {
    source = memory_file(content);
  }
  archive::WorkCounters counters;
  auto read_over = [&](const cache::TeeResult&) {
    ++run.read_overs;
    struct stat st {};
    if (spool_fd.valid() && ::fstat(spool_fd.get(), &st) == 0) {
      run.spooled_at_read_over = st.st_size;
    }
  };
  run.result =
    cache::tee_source(source.get(), deliver_wr.get(), spool_fd.get(), policy, &counters, lane.lane(), read_over);
  EXPECT_EQ(run.read_overs, run.result ? 1 : 0);
  deliver_wr.reset();
  run.delivered = reader.get();
  if (feeder.valid()) {
    source.reset();
    feeder.get();
  }
  if (run.result) {
    EXPECT_EQ(counters.bytes.load(), run.result->bytes);
  }
  if (spool) {
    ::lseek(spool_fd.get(), 0, SEEK_SET);
    run.spooled = read_to_end(spool_fd.get());
  }
  return run;
}

cache::SpoolPolicy roomy()
{
  cache::SpoolPolicy p;
  p.max_bytes = 1ULL << 40;
  p.max_stall = std::chrono::milliseconds(60000); // a loaded test machine must not drop it
  return p;
}

} // namespace

TEST(Spool, AFileReachesTheJobAndTheSpoolWhole)
{
  const std::string content = random_bytes(5 * 1024 * 1024 + 123);
  auto run = tee(content, false, roomy(), true);
  ASSERT_TRUE(run.result) << run.result.error().message;
  EXPECT_EQ(run.result->bytes, content.size());
  EXPECT_TRUE(run.result->delivered);
  EXPECT_EQ(run.result->spool_dropped, "");
  EXPECT_TRUE(run.delivered == content);
  EXPECT_TRUE(run.spooled == content);
}

TEST(Spool, APipeReachesTheJobAndTheSpoolWhole)
{
  const std::string content = random_bytes(3 * 1024 * 1024 + 7);
  auto run = tee(content, true, roomy(), true);
  ASSERT_TRUE(run.result) << run.result.error().message;
  EXPECT_EQ(run.result->bytes, content.size());
  EXPECT_TRUE(run.delivered == content);
  EXPECT_TRUE(run.spooled == content);
}

TEST(Spool, ADeliveryThatStopsEarlyStillLeavesTheWholeSpool)
{
  // An extractor stops reading at the archive's end marker; the padding after it still belongs
  // in the spool the cache is filled from.
  const std::string content = random_bytes(4 * 1024 * 1024);
  for (bool as_pipe : {false, true}) {
    auto run = tee(content, as_pipe, roomy(), true, 1000);
    ASSERT_TRUE(run.result) << run.result.error().message;
    EXPECT_FALSE(run.result->delivered);
    EXPECT_EQ(run.delivered, content.substr(0, 1000));
    EXPECT_EQ(run.result->spool_dropped, "");
    EXPECT_TRUE(run.spooled == content) << (as_pipe ? "pipe" : "file") << ": " << run.spooled.size();
  }
}

TEST(Spool, MoreThanTheCacheHoldsIsDeliveredButNotSpooled)
{
  const std::string content = random_bytes(3 * 1024 * 1024);
  auto policy = roomy();
  policy.max_bytes = 1024 * 1024;
  for (bool as_pipe : {false, true}) {
    auto run = tee(content, as_pipe, policy, true);
    ASSERT_TRUE(run.result) << run.result.error().message;
    EXPECT_TRUE(run.delivered == content);
    EXPECT_EQ(run.result->spool_dropped, "larger than the node cache");
    EXPECT_EQ(run.spooled, ""); // its room is given back at once
  }
}

TEST(Spool, ASpoolThatStallsIsDroppedAndTheJobGetsEveryByte)
{
  const std::string content = random_bytes(2 * 1024 * 1024);
  auto policy = roomy();
  policy.max_stall = std::chrono::milliseconds(-1); // every spool write "stalls"
  auto run = tee(content, false, policy, true);
  ASSERT_TRUE(run.result) << run.result.error().message;
  EXPECT_TRUE(run.delivered == content);
  EXPECT_EQ(run.result->spool_dropped, "the node cache's disk could not keep up");
}

TEST(Spool, WithoutASpoolOnlyTheJobReads)
{
  const std::string content = random_bytes(1024 * 1024 + 5);
  auto run = tee(content, false, roomy(), false);
  ASSERT_TRUE(run.result) << run.result.error().message;
  EXPECT_TRUE(run.delivered == content);
  EXPECT_EQ(run.result->bytes, content.size());
}

// Through a lane the spool lags the job: the read is over, and the job has every byte, before the
// spool holds any (the lane holds them, uncopied), and the spool is whole after.
TEST(Spool, ThroughALaneTheJobHasEveryByteBeforeTheSpoolIsWritten)
{
  ASSERT_GE(lane_size(), 256U << 10);
  // A quarter of the lane: a pipe holds buffers, a page each at most, and bytes that come through
  // a pipe in pieces fill some of them in part.
  const std::string content = random_bytes(lane_size() / 4 - 123);
  for (bool as_pipe : {false, true}) {
    auto run = tee(content, as_pipe, roomy(), true, std::string::npos, content.size());
    ASSERT_TRUE(run.result) << run.result.error().message;
    EXPECT_EQ(run.spooled_at_read_over, 0) << (as_pipe ? "pipe" : "file");
    EXPECT_EQ(run.result->spool_dropped, "");
    EXPECT_TRUE(run.delivered == content);
    EXPECT_TRUE(run.spooled == content) << run.spooled.size();
  }
}

// The daemon's way: the job's pipe is closed when the read is over (its copy sees the end), and
// the spool's writer waits for the word that the job's copy is done, not for the read's end.
TEST(Spool, ThroughALaneTheWriterWaitsForTheJobsCopyToBeDone)
{
  const std::string content = random_bytes(lane_size() / 4 - 77);
  TestLane lane(content.size());
  UniqueFd spool(::memfd_create("spool", MFD_CLOEXEC));
  int g[2];
  ASSERT_EQ(::pipe2(g, O_CLOEXEC), 0);
  UniqueFd go_rd(g[0]);
  UniqueFd go_wr(g[1]);
  int d[2];
  ASSERT_EQ(::pipe2(d, O_CLOEXEC), 0);
  UniqueFd deliver_rd(d[0]);
  UniqueFd deliver_wr(d[1]);
  off_t spooled_before_go = -1;
  auto job = std::async(std::launch::async, [&] {
    std::string got = read_to_end(deliver_rd.get()); // its end: the read closed the pipe
    std::this_thread::sleep_for(std::chrono::milliseconds(100)); // the job's copy is still being made
    struct stat st {};
    spooled_before_go = ::fstat(spool.get(), &st) == 0 ? st.st_size : -1;
    EXPECT_EQ(::write(go_wr.get(), "g", 1), 1);
    return got;
  });
  UniqueFd source = memory_file(content);
  cache::SpoolLane l = lane.lane();
  l.go = go_rd.get();
  auto r = cache::tee_source(source.get(), deliver_wr.get(), spool.get(), roomy(), nullptr, l,
                             [&](const cache::TeeResult&) { deliver_wr.reset(); });
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(job.get() == content);
  EXPECT_EQ(spooled_before_go, 0);
  EXPECT_EQ(r->spool_dropped, "");
  ::lseek(spool.get(), 0, SEEK_SET);
  EXPECT_TRUE(read_to_end(spool.get()) == content);
}

// A lane smaller than the source: its writer starts once it is full, and nothing is lost.
TEST(Spool, ASourceLargerThanItsLaneIsSpooledWholeAsItPasses)
{
  const std::string content = random_bytes(lane_size() * 6 + 5);
  for (bool as_pipe : {false, true}) {
    auto run = tee(content, as_pipe, roomy(), true, std::string::npos, content.size());
    ASSERT_TRUE(run.result) << run.result.error().message;
    EXPECT_GT(run.spooled_at_read_over, 0) << (as_pipe ? "pipe" : "file");
    EXPECT_EQ(run.result->spool_dropped, "");
    EXPECT_TRUE(run.delivered == content);
    EXPECT_TRUE(run.spooled == content) << run.spooled.size();
  }
}

TEST(Spool, ThroughALaneAnEarlyEndAndMoreThanTheCacheHoldsAreAsWithout)
{
  const std::string content = random_bytes(4 * 1024 * 1024);
  auto small = roomy();
  small.max_bytes = 1024 * 1024;
  for (bool as_pipe : {false, true}) {
    auto early = tee(content, as_pipe, roomy(), true, 1000, content.size());
    ASSERT_TRUE(early.result) << early.result.error().message;
    EXPECT_FALSE(early.result->delivered);
    EXPECT_TRUE(early.spooled == content) << early.spooled.size();
    auto large = tee(content, as_pipe, small, true, std::string::npos, content.size());
    ASSERT_TRUE(large.result) << large.result.error().message;
    EXPECT_TRUE(large.delivered == content);
    EXPECT_EQ(large.result->spool_dropped, "larger than the node cache");
    EXPECT_EQ(large.spooled, "");
  }
}

// A spool whose medium never takes a byte (its writer blocked) costs the job nothing: the lane
// fills, the spool is dropped after the stall, the job gets every byte and the read is over while
// the writer is still blocked.
TEST(Spool, AWriterThatCannotKeepUpIsDroppedWithoutHoldingTheJob)
{
  const std::string content = random_bytes(6 * 1024 * 1024);
  TestLane lane(content.size());
  int s[2];
  ASSERT_EQ(::pipe2(s, O_CLOEXEC), 0); // the "spool": a pipe nobody reads until the read is over
  UniqueFd stuck_rd(s[0]);
  UniqueFd stuck_wr(s[1]);
  int d[2];
  ASSERT_EQ(::pipe2(d, O_CLOEXEC), 0);
  UniqueFd deliver_rd(d[0]);
  UniqueFd deliver_wr(d[1]);
  auto reader = std::async(std::launch::async, [&] { return read_to_end(deliver_rd.get()); });
  UniqueFd source = memory_file(content);
  auto policy = roomy();
  policy.max_stall = std::chrono::milliseconds(100);
  std::future<std::string> unblock;
  auto read_over = [&](const cache::TeeResult& t) {
    EXPECT_EQ(t.spool_dropped, "the node cache's disk could not keep up");
    deliver_wr.reset();
    EXPECT_TRUE(reader.get() == content); // the job's copy is whole while the writer is still stuck
    unblock = std::async(std::launch::async, [&] { return read_to_end(stuck_rd.get()); });
  };
  auto r = cache::tee_source(source.get(), deliver_wr.get(), stuck_wr.get(), policy, nullptr, lane.lane(), read_over);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->bytes, content.size());
  EXPECT_EQ(r->spool_dropped, "the node cache's disk could not keep up");
  stuck_wr.reset();
  ASSERT_TRUE(unblock.valid());
  EXPECT_LT(unblock.get().size(), content.size());
}

namespace {

// A spool written in pieces by one thread while follow_spool copies it to a pipe another reads:
// what the reader got, and follow_spool's answer. `end` is the verdict after the last piece.
struct Followed
{
  std::string got;
  Status status = ok_status();
};

Followed follow(const std::string& content, cache::SpoolState end, bool make_spool = true)
{
  char tmpl[] = "/tmp/stagehand-follow-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  int p[2];
  EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFd rd(p[0]);
  UniqueFd wr(p[1]);
  cache::SpoolVerdict verdict;
  auto reader = std::async(std::launch::async, [&] { return read_to_end(rd.get()); });
  auto follower = std::async(std::launch::async, [&] {
    auto st = cache::follow_spool(dir_fd.get(), wr.get(), verdict);
    wr.reset();
    return st;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20)); // the follower waits for the spool
  if (make_spool) {
    UniqueFd spool(::openat(dir_fd.get(), cache::k_spool_name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    for (std::size_t at = 0; at < content.size(); at += 300000) {
      const auto piece = content.substr(at, 300000);
      EXPECT_EQ(::write(spool.get(), piece.data(), piece.size()), static_cast<ssize_t>(piece.size()));
      std::this_thread::sleep_for(std::chrono::milliseconds(5)); // the follower catches up, waits
    }
  }
  verdict.state.store(static_cast<std::uint64_t>(end));
  Followed out;
  out.status = follower.get();
  out.got = reader.get();
  ::unlinkat(dir_fd.get(), cache::k_spool_name, 0);
  ::rmdir(dir.c_str());
  return out;
}

} // namespace

// A cache fill follows its spool as the read writes it: every byte, ending with the verdict.
TEST(Spool, AFollowerGetsEveryByteOfAGrowingSpoolOnceItIsComplete)
{
  const std::string content = random_bytes(3 * 1024 * 1024 + 17);
  auto f = follow(content, cache::SpoolState::complete);
  ASSERT_TRUE(f.status) << f.status.error().message;
  EXPECT_TRUE(f.got == content);
}

TEST(Spool, AFollowerOfADroppedSpoolFails)
{
  auto f = follow(random_bytes(1024 * 1024), cache::SpoolState::dropped);
  ASSERT_FALSE(f.status);
  EXPECT_NE(f.status.error().message.find("given up"), std::string::npos);
  auto none = follow("", cache::SpoolState::dropped, false); // the tee could not make it
  ASSERT_FALSE(none.status);
  EXPECT_NE(none.status.error().message.find("not made"), std::string::npos);
}
