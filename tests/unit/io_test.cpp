// fs/io and the failures injected through its seam (io_hooks): ENOSPC and EINTR in the extractor
// (streamed and queued files), the copy engine's read/write path, the keep marker and the config,
// without a root-mounted filesystem.
#include "stagehand/config/config.hpp"
#include "stagehand/fs/io.hpp"
#include "stagehand/stage/copy.hpp"
#include "stagehand/stage/run.hpp"
#include "stagehand/tmpdir/job_dir.hpp"
#include "stagehand/util/fd.hpp"

#include "test_support.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <thread>
#include <cstdint>
#include <cstdlib>

using namespace stagehand;
using namespace stagehand::test;

namespace {

int sh(const std::string& cmd) { return std::system(("set -e; " + cmd).c_str()); }

UniqueFd open_dir(const std::string& path) { return UniqueFd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); }

// Installs hooks for one test and always removes them.
struct HookGuard
{
  explicit HookGuard(fs::IoHooks hooks) { fs::io_hooks() = std::move(hooks); }
  ~HookGuard() { fs::io_hooks() = {}; }
};

// Every odd call is interrupted (EINTR) and every even one writes at most 7 bytes: the callers
// must retry both. Thread-safe: the extractor's writer threads call it too.
struct Flaky
{
  std::atomic<unsigned> calls{0};
  std::atomic<unsigned> interrupted{0};
  bool interrupt()
  {
    if (calls++ % 2 == 0) {
      ++interrupted;
      errno = EINTR;
      return true;
    }
    return false;
  }
};

fs::IoHooks flaky_hooks(Flaky& f)
{
  fs::IoHooks h;
  h.read = [&f](int fd, void* buf, std::size_t len) -> ssize_t { return f.interrupt() ? -1 : ::read(fd, buf, std::min<std::size_t>(len, 7)); };
  h.write = [&f](int fd, const void* buf, std::size_t len) -> ssize_t { return f.interrupt() ? -1 : ::write(fd, buf, std::min<std::size_t>(len, 7)); };
  h.pwrite = [&f](int fd, const void* buf, std::size_t len, off_t off) -> ssize_t {
    return f.interrupt() ? -1 : ::pwrite(fd, buf, std::min<std::size_t>(len, 4096), off);
  };
  return h;
}

// Writes and pwrites fail with ENOSPC from the first call on.
fs::IoHooks disk_full_hooks(std::atomic<unsigned>& failures)
{
  fs::IoHooks h;
  h.write = [&failures](int, const void*, std::size_t) -> ssize_t {
    ++failures;
    errno = ENOSPC;
    return -1;
  };
  h.pwrite = [&failures](int, const void*, std::size_t, off_t) -> ssize_t {
    ++failures;
    errno = ENOSPC;
    return -1;
  };
  return h;
}

// A source directory with a tar holding one large file (streamed by the reader) and many small
// ones (queued to writer threads), a tar of the small ones only, and an empty SLURM_TMPDIR.
struct Staging
{
  TempDir dir;
  Staging()
  {
    sh("cd '" + dir.path() + "' && mkdir -p tmp src/small && head -c 3000000 /dev/urandom > src/big && "
       "for i in $(seq 1 50); do head -c $((i * 100)) /dev/urandom > src/small/f$i; done && "
       "tar cf pack.tar -C src . && tar cf small.tar -C src/small . && head -c 5000 /dev/urandom > plain.bin");
  }
  Result<std::vector<std::string>> stage(const std::string& option, unsigned writer_threads = 0)
  {
    auto sources = stage::check_sources(*stage::parse_stage_option(option), dir.path(), StageConfig{},
                                        [](int) { return true; });
    if (!sources) {
      return sources.error();
    }
    UniqueFd tmp = open_dir(dir / "tmp");
    stage::StageLimits limits;
    limits.writer_threads = writer_threads;
    return stage::stage_all(*sources, tmp.get(), dir / "tmp", limits);
  }
  bool tmp_is_empty() { return sh("test -z \"$(ls -A '" + dir / "tmp" + "')\"") == 0; }
};

} // namespace

TEST(Io, ShortTransfersAndEintrAreRetried)
{
  TempDir dir;
  Flaky flaky;
  HookGuard guard(flaky_hooks(flaky));
  const std::string text(10000, 'x');
  UniqueFd w(::open((dir / "f").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
  ASSERT_TRUE(fs::write_all(w.get(), text, "f"));
  ASSERT_TRUE(fs::pwrite_all(w.get(), "yy", 2, 20000, "f"));
  UniqueFd r(::open((dir / "f").c_str(), O_RDONLY | O_CLOEXEC));
  auto back = fs::read_all(r.get(), "f");
  ASSERT_TRUE(back) << back.error().message;
  EXPECT_EQ(back->size(), 20002U);
  EXPECT_EQ(back->substr(0, 10000), text);
  EXPECT_EQ(back->substr(20000), "yy");
  EXPECT_GT(flaky.interrupted.load(), 100U);
  ::lseek(r.get(), 0, SEEK_SET);
  auto capped = fs::read_all(r.get(), "f", 100);
  ASSERT_FALSE(capped);
  EXPECT_EQ(capped.error().kind, ErrorKind::limit);
  EXPECT_EQ(capped.error().message, "f: larger than 100 bytes (limit)");
}

TEST(Io, ExtractionSurvivesEintrWithEveryWriterSetup)
{
  for (unsigned threads : {1U, 4U}) {
    Staging s;
    Flaky flaky;
    HookGuard guard(flaky_hooks(flaky));
    auto lines = s.stage("pack.tar:out", threads);
    ASSERT_TRUE(lines) << lines.error().message;
    EXPECT_EQ(sh("diff -r '" + s.dir / "src" + "' '" + s.dir / "tmp/out" + "'"), 0) << threads << " writers";
    EXPECT_GT(flaky.interrupted.load(), 50U);
  }
}

TEST(Io, DiskFullWhileUnpackingNamesTheSourceAndLeavesNothing)
{
  // Streamed by the reader, and (small.tar, 4 writers) written by the writer threads.
  const std::pair<std::string, unsigned> cases[] = {{"pack.tar", 1}, {"pack.tar", 4}, {"small.tar", 1}, {"small.tar", 4}};
  for (const auto& [archive, threads] : cases) {
    Staging s;
    std::atomic<unsigned> failures{0};
    HookGuard guard(disk_full_hooks(failures));
    auto r = s.stage("plain.bin:keep.bin," + archive + ":out", threads);
    ASSERT_FALSE(r);
    EXPECT_EQ(r.error().kind, ErrorKind::io);
    EXPECT_EQ(r.error().code, ENOSPC);
    EXPECT_EQ(r.error().message.rfind("--stage-data: " + archive + ": cannot write ", 0), 0U) << r.error().message;
    EXPECT_NE(r.error().message.find(": No space left on device"), std::string::npos) << r.error().message;
    EXPECT_GT(failures.load(), 0U);
    EXPECT_TRUE(s.tmp_is_empty()) << "partial data left behind (" << archive << ", " << threads << " writers)";
  }
}

// A pipe is copied with splice; into a destination that refuses it (EINVAL, as some FUSE
// filesystems do) the copy engine's read/write path runs.
namespace {

ssize_t no_splice(int, int, std::size_t)
{
  errno = EINVAL;
  return -1;
}

// The system call itself, for a hook that passes a splice on (at most `cap` bytes of it).
ssize_t real_splice(int in, int out, std::size_t len, std::size_t cap = SIZE_MAX)
{
  return ::splice(in, nullptr, out, nullptr, std::min(len, cap), SPLICE_F_MOVE);
}

// Reads that pass through, counted.
void count_reads(fs::IoHooks& hooks, std::atomic<unsigned>& reads)
{
  hooks.read = [&reads](int fd, void* buf, std::size_t len) -> ssize_t {
    ++reads;
    return ::read(fd, buf, len);
  };
}

// The feeder of a pipe that copy_file copies into DIR/NAME.
Status copy_from_pipe(const std::string& dir, const std::string& name, const std::string& data)
{
  ::signal(SIGPIPE, SIG_IGN); // the feeder's write fails with EPIPE instead when the copy stops early
  int p[2];
  if (::pipe(p) != 0) {
    return Error::from_errno("pipe");
  }
  UniqueFd rd(p[0]);
  UniqueFd wr(p[1]);
  std::thread feeder([&] {
    (void)!::write(wr.get(), data.data(), data.size()); // EPIPE once the copy gave up
    wr.reset();
  });
  UniqueFd dest = open_dir(dir);
  stage::CopyStats stats;
  auto st = stage::copy_file(rd.get(), dest.get(), name, 1ULL << 30, stats, "data/stream");
  rd.reset(); // unblocks the feeder if the copy stopped early
  feeder.join();
  return st;
}

} // namespace

TEST(Io, CopyReadWritePathRetriesEintrAndReportsDiskFull)
{
  TempDir dir;
  const std::string data(200000, 'd');
  auto copy_named = [&](const std::string& name) { return copy_from_pipe(dir.path(), name, data); };
  {
    Flaky flaky;
    fs::IoHooks hooks = flaky_hooks(flaky);
    hooks.write = [&flaky](int fd, const void* buf, std::size_t len) -> ssize_t {
      return flaky.interrupt() ? -1 : ::write(fd, buf, std::min<std::size_t>(len, 7000));
    };
    hooks.splice = no_splice;
    HookGuard guard(hooks);
    auto st = copy_named("ok");
    ASSERT_TRUE(st) << st.error().message;
    EXPECT_GT(flaky.interrupted.load(), 10U);
  }
  EXPECT_EQ(read_file(dir / "ok"), data);
  {
    std::atomic<unsigned> failures{0};
    fs::IoHooks hooks = disk_full_hooks(failures);
    hooks.splice = no_splice;
    HookGuard guard(hooks);
    auto st = copy_named("full");
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error().kind, ErrorKind::io);
    EXPECT_EQ(st.error().message, "data/stream: cannot write: No space left on device");
  }
}

// The daemon delivers a miss through a pipe: spliced into the copy (no buffer of the child's to
// fill), interrupted splices retried, a full disk named.
TEST(Io, APipeIsSplicedIntoTheCopyRetryingEintrAndReportsDiskFull)
{
  TempDir dir;
  std::string data(3000000, '\0');
  for (std::size_t i = 0; i < data.size(); ++i) {
    data[i] = static_cast<char>('a' + i % 23);
  }
  {
    Flaky flaky;
    std::atomic<unsigned> spliced{0};
    fs::IoHooks hooks;
    hooks.splice = [&](int in, int out, std::size_t len) -> ssize_t {
      if (flaky.interrupt()) {
        return -1;
      }
      ++spliced;
      return real_splice(in, out, len, 70000);
    };
    std::atomic<unsigned> reads{0};
    count_reads(hooks, reads);
    HookGuard guard(hooks);
    auto st = copy_from_pipe(dir.path(), "ok", data);
    ASSERT_TRUE(st) << st.error().message;
    EXPECT_GT(flaky.interrupted.load(), 10U);
    EXPECT_GE(spliced.load(), data.size() / 70000);
    EXPECT_EQ(reads.load(), 0U) << "the pipe was read into a buffer, not spliced";
  }
  EXPECT_EQ(read_file(dir / "ok"), data);
  {
    fs::IoHooks hooks;
    hooks.splice = [](int, int, std::size_t) -> ssize_t {
      errno = ENOSPC;
      return -1;
    };
    HookGuard guard(hooks);
    auto st = copy_from_pipe(dir.path(), "full", data);
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error().kind, ErrorKind::io);
    EXPECT_EQ(st.error().message, "data/stream: cannot copy: No space left on device");
  }
  {
    // Refused after bytes have gone: they cannot be read again, so an error, not a fallback.
    fs::IoHooks hooks;
    std::atomic<unsigned> calls{0};
    hooks.splice = [&](int in, int out, std::size_t len) -> ssize_t {
      if (calls++ == 0) {
        return real_splice(in, out, len, 4096);
      }
      errno = EINVAL;
      return -1;
    };
    HookGuard guard(hooks);
    auto st = copy_from_pipe(dir.path(), "half", data);
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error().message, "data/stream: cannot copy: Invalid argument");
  }
}

// A regular file is copied in the kernel (copy_file_range): neither spliced nor read.
TEST(Io, ARegularFileIsCopiedInTheKernel)
{
  TempDir dir;
  const std::string data(300000, 'r');
  write_file(dir / "src", data);
  std::atomic<unsigned> reads{0};
  std::atomic<unsigned> splices{0};
  fs::IoHooks hooks;
  count_reads(hooks, reads);
  hooks.splice = [&](int in, int out, std::size_t len) -> ssize_t {
    ++splices;
    return real_splice(in, out, len);
  };
  HookGuard guard(hooks);
  UniqueFd src(::open((dir / "src").c_str(), O_RDONLY | O_CLOEXEC));
  UniqueFd dest = open_dir(dir.path());
  stage::CopyStats stats;
  auto st = stage::copy_file(src.get(), dest.get(), "copy", 1ULL << 30, stats, "src");
  ASSERT_TRUE(st) << st.error().message;
  EXPECT_EQ(read_file(dir / "copy"), data);
  EXPECT_EQ(reads.load(), 0U);
  EXPECT_EQ(splices.load(), 0U);
}

TEST(Io, KeepMarkerOnAFullDiskFailsAndLeavesNoTemporaryFile)
{
  TempDir dir;
  UniqueFd base = open_dir(dir.path());
  ASSERT_EQ(::mkdir((dir / "job_42").c_str(), 0700), 0);
  std::atomic<unsigned> failures{0};
  {
    HookGuard guard(disk_full_hooks(failures));
    auto st = tmpdir::mark_kept(base.get(), 42, 1000);
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error().code, ENOSPC);
  }
  EXPECT_EQ(sh("test \"$(ls -A '" + dir.path() + "')\" = job_42"), 0) << "a temporary marker was left";
}

TEST(Io, ConfigIsReadThroughInterruptions)
{
  STAGEHAND_REQUIRE_ROOT(); // the config must be root-owned
  TempDir dir;
  write_file(dir / "stagehand.toml", "[tmpdir]\nbase = \"/local/x\"\n[ddp]\nport_min = 21000\n");
  ::chmod((dir / "stagehand.toml").c_str(), 0644);
  Flaky flaky;
  HookGuard guard(flaky_hooks(flaky));
  auto config = load_config(dir / "stagehand.toml", OwnerCheck::require_root_owned);
  ASSERT_TRUE(config) << config.error().message;
  EXPECT_EQ(config->tmpdir.base, "/local/x");
  EXPECT_EQ(config->ddp.port_min, 21000);
  EXPECT_GT(flaky.interrupted.load(), 3U);
}

// A whole small file by its path (the daemon's reads of /proc): its text, a limit, no symlink.
TEST(Io, ReadFileGivesTheWholeTextWithinItsLimitAndFollowsNoSymlink)
{
  TempDir dir;
  const std::string text = "cpu  1 2 3 4\ncpu0 1 2 3 4\n";
  {
    UniqueFd w(::open((dir / "stat").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));
    ASSERT_TRUE(fs::write_all(w.get(), text, "stat"));
  }
  auto got = fs::read_file(dir / "stat", 1024);
  ASSERT_TRUE(got) << got.error().message;
  EXPECT_EQ(*got, text);
  EXPECT_FALSE(fs::read_file(dir / "stat", 4)); // over its limit
  ASSERT_EQ(::symlink((dir / "stat").c_str(), (dir / "link").c_str()), 0);
  auto linked = fs::read_file(dir / "link", 1024);
  ASSERT_FALSE(linked);
  EXPECT_NE(linked.error().message.find("link"), std::string::npos);
  EXPECT_TRUE(fs::read_file("/proc/self/status", 64U << 10)); // the kernel's own files read whole
}
