// The one read of a cache miss: the job's pipe and the spool each get every byte of the source,
// and the spool gives way (never the job) when it cannot take them.
#include "stagehand/cache/spool.hpp"
#include "stagehand/util/fd.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <future>
#include <random>
#include <functional>
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
};

// Tees `in` (a file, or a pipe fed with `content` when `as_pipe`) with a reader on the delivery
// that stops after `read_only` bytes (closing its end early, as an extractor that saw the
// archive's end does).
Run tee(const std::string& content, bool as_pipe, cache::SpoolPolicy policy, bool spool,
        std::size_t read_only = std::string::npos)
{
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
  } else {
    source = memory_file(content);
  }
  archive::WorkCounters counters;
  run.result = cache::tee_source(source.get(), deliver_wr.get(), spool_fd.get(), policy, &counters);
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
  p.patience.grace = std::chrono::milliseconds(60000); // a loaded test machine must not drop it
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

namespace {

// A file source whose spool goes to a pipe standing in for the cache's disk, which `drain`
// empties (none: the disk's end closed before the read); its delivery read to its end by a reader
// of its own (`deliver`: false, a delivery that has gone before the first byte). The tee is given
// 60 s: a tee still running then (waiting on the "disk") is released by closing the disk's end,
// and the run says it timed out.
struct DiskRun
{
  Result<cache::TeeResult> result = Error::internal("not run");
  bool timed_out = false;
  std::string delivered;
  std::string spooled;
};
DiskRun tee_to_disk(const std::string& content, const cache::SpoolPolicy& policy,
                    const std::function<std::string(int)>& drain, bool deliver = true)
{
  DiskRun run;
  int s[2];
  int d[2];
  EXPECT_EQ(::pipe2(s, O_CLOEXEC), 0);
  EXPECT_EQ(::pipe2(d, O_CLOEXEC), 0);
  UniqueFd spool_rd(s[0]);
  UniqueFd spool_wr(s[1]);
  UniqueFd deliver_rd(d[0]);
  UniqueFd deliver_wr(d[1]);
  if (!deliver) {
    deliver_rd.reset();
  }
  if (!drain) {
    spool_rd.reset();
  }
  auto reader = std::async(std::launch::async, [&] { return deliver ? read_to_end(deliver_rd.get()) : std::string(); });
  auto disk = std::async(std::launch::async, [&] { return drain ? drain(spool_rd.get()) : std::string(); });
  UniqueFd source = memory_file(content);
  auto teed = std::async(std::launch::async,
                         [&] { return cache::tee_source(source.get(), deliver_wr.get(), spool_wr.get(), policy); });
  if (teed.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    run.timed_out = true;
    spool_rd.reset();
  }
  run.result = teed.get();
  if (deliver && !run.timed_out) { // the delivery's end came with the source's: its pipe was closed
    EXPECT_EQ(reader.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  }
  deliver_wr.reset();
  run.delivered = reader.get();
  spool_wr.reset();
  // A disk still reading gets to the spool's end; one that stopped reading (a writer held back
  // behind it) is released by closing its end (EPIPE).
  if (spool_rd.valid() && disk.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
    spool_rd.reset();
  }
  run.spooled = disk.get();
  return run;
}

// A disk that takes 64 KiB, then pauses `pause`, until the spool's end.
std::function<std::string(int)> pausing_disk(std::chrono::milliseconds pause)
{
  return [pause](int fd) {
    std::string got;
    char buf[65536];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof buf);
      if (n <= 0) {
        return got;
      }
      got.append(buf, static_cast<std::size_t>(n));
      std::this_thread::sleep_for(pause);
    }
  };
}

} // namespace

TEST(Spool, ASpoolTheDiskHoldsBackIsDroppedAndTheJobGetsEveryByte)
{
  // The disk takes nothing: the read waits for the spool's writer no longer than its patience
  // (50 ms and 5% of its time, all waits together), then goes on without it.
  const std::string content = random_bytes(8 * 1024 * 1024);
  auto policy = roomy();
  policy.patience.grace = std::chrono::milliseconds(50);
  auto run = tee_to_disk(content, policy, [](int) { return std::string(); }); // reads nothing
  ASSERT_FALSE(run.timed_out) << "the job's bytes waited for the cache's disk";
  ASSERT_TRUE(run.result) << run.result.error().message;
  EXPECT_TRUE(run.delivered == content);
  EXPECT_EQ(run.result->spool_dropped, "the node cache's disk could not keep up");
}

TEST(Spool, ADiskThatThrottlesEveryWriteALittleIsDroppedTooWhileAJobWaits)
{
  // No write stalls for long (30 ms each, the limit for one is 1 s), but together they would
  // hold the job back by 3.8 s: the spool is dropped once they pass the patience (here 1 s).
  const std::string content = random_bytes(8 * 1024 * 1024);
  auto policy = roomy();
  policy.patience.grace = std::chrono::milliseconds(1000);
  policy.patience.share = 0.0;
  auto run = tee_to_disk(content, policy, pausing_disk(std::chrono::milliseconds(30)));
  ASSERT_FALSE(run.timed_out);
  ASSERT_TRUE(run.result) << run.result.error().message;
  EXPECT_TRUE(run.delivered == content);
  EXPECT_EQ(run.result->spool_dropped, "the node cache's disk could not keep up");
}

TEST(Spool, WithoutADeliveryASlowDiskIsWaitedForAndTheSpoolKeptWhole)
{
  // Nobody waits for these bytes but the cache (a read for the cache alone, a zip): a disk far
  // slower than the source (20 ms per 64 KiB: 2.6 s, past a patience of 1 s, though no single
  // write comes near patience.grace) keeps the whole spool.
  const std::string content = random_bytes(8 * 1024 * 1024);
  auto policy = roomy();
  policy.patience.grace = std::chrono::milliseconds(1000);
  policy.patience.share = 0.0;
  auto run = tee_to_disk(content, policy, pausing_disk(std::chrono::milliseconds(20)), false);
  ASSERT_FALSE(run.timed_out);
  ASSERT_TRUE(run.result) << run.result.error().message;
  EXPECT_EQ(run.result->spool_dropped, "");
  EXPECT_TRUE(run.spooled == content);
}

TEST(Spool, ASlowSourceIsNoStallOfTheSpool)
{
  // A source that a slow shared filesystem fills (100 KB, then 2 s later 100 KB more, a stall
  // limit of 1 s): the spool's writer waits for bytes, which is not the disk failing to keep up.
  const std::string content = random_bytes(2 * 100000);
  auto policy = roomy();
  policy.patience.grace = std::chrono::milliseconds(1000);
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFd source(p[0]);
  auto feeder = std::async(std::launch::async, [wr = p[1], &content] {
    for (std::size_t at = 0; at < content.size(); at += 100000) {
      if (at > 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2000));
      }
      if (::write(wr, content.data() + at, 100000) != 100000) {
        break;
      }
    }
    ::close(wr);
  });
  int d[2];
  ASSERT_EQ(::pipe2(d, O_CLOEXEC), 0);
  UniqueFd deliver_rd(d[0]);
  UniqueFd deliver_wr(d[1]);
  auto reader = std::async(std::launch::async, [&] { return read_to_end(deliver_rd.get()); });
  UniqueFd spool(::memfd_create("spool", MFD_CLOEXEC));
  auto r = cache::tee_source(source.get(), deliver_wr.get(), spool.get(), policy);
  deliver_wr.reset();
  source.reset();
  feeder.get();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(reader.get() == content);
  EXPECT_EQ(r->spool_dropped, "");
  ::lseek(spool.get(), 0, SEEK_SET);
  EXPECT_TRUE(read_to_end(spool.get()) == content);
}

TEST(Spool, ASpoolThatCannotBeWrittenIsDroppedSayingSo)
{
  const std::string content = random_bytes(4 * 1024 * 1024);
  auto run = tee_to_disk(content, roomy(), nullptr); // the disk's end closed: every write fails
  ASSERT_FALSE(run.timed_out);
  ASSERT_TRUE(run.result) << run.result.error().message;
  EXPECT_TRUE(run.delivered == content);
  EXPECT_EQ(run.result->spool_dropped.rfind("the spool could not be written: ", 0), 0U) << run.result->spool_dropped;
}

TEST(Spool, AWriterThatPausesIsNoStallOfTheSpool)
{
  // A directory's reader copies the job's files between its writes to the stream (the tee then
  // delivers nothing): waiting for its next bytes is not the cache's disk failing to keep up.
  const std::string content = random_bytes(3 * 100000);
  auto policy = roomy();
  policy.patience.grace = std::chrono::milliseconds(100);
  int p[2];
  int d[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(d, O_CLOEXEC), 0);
  ::close(d[0]);
  UniqueFd source(p[0]);
  UniqueFd no_delivery(d[1]);
  auto feeder = std::async(std::launch::async, [wr = p[1], &content] {
    for (std::size_t at = 0; at < content.size(); at += 100000) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      if (::write(wr, content.data() + at, 100000) != 100000) {
        break;
      }
    }
    ::close(wr);
  });
  UniqueFd spool(::memfd_create("spool", MFD_CLOEXEC));
  auto r = cache::tee_source(source.get(), no_delivery.get(), spool.get(), policy);
  source.reset(); // a tee that gave up early must not leave the feeder blocked
  feeder.get();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->spool_dropped, "");
  ::lseek(spool.get(), 0, SEEK_SET);
  EXPECT_TRUE(read_to_end(spool.get()) == content);
}

TEST(Spool, WithoutASpoolOnlyTheJobReads)
{
  const std::string content = random_bytes(1024 * 1024 + 5);
  auto run = tee(content, false, roomy(), false);
  ASSERT_TRUE(run.result) << run.result.error().message;
  EXPECT_TRUE(run.delivered == content);
  EXPECT_EQ(run.result->bytes, content.size());
}

namespace {

// A spool written in pieces by one thread while follow_spool copies it to a pipe another reads:
// what the reader got, and follow_spool's answer. `end` is the verdict after the last piece.
struct Followed
{
  std::string got;
  Status status = ok_status();
};

// The fill's end is a pipe, as in a follower (the spool spliced into it), or a socket, which a file
// cannot be spliced into: the read-and-write way, as where the cache's filesystem cannot splice.
enum class FillEnd { pipe, socket };

Followed follow(const std::string& content, cache::SpoolState end, bool make_spool = true,
                FillEnd fill_end = FillEnd::pipe)
{
  char tmpl[] = "/tmp/stagehand-follow-XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  int p[2];
  if (fill_end == FillEnd::pipe) {
    EXPECT_EQ(::pipe2(p, O_CLOEXEC), 0);
  } else {
    EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p), 0);
  }
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
  auto copied = follow(content, cache::SpoolState::complete, true, FillEnd::socket);
  ASSERT_TRUE(copied.status) << copied.status.error().message;
  EXPECT_TRUE(copied.got == content);
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
