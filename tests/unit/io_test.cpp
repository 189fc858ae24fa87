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

// A pipe has no copy_file_range or sendfile into a file: the copy engine's read/write path runs.
TEST(Io, CopyReadWritePathRetriesEintrAndReportsDiskFull)
{
  TempDir dir;
  ::signal(SIGPIPE, SIG_IGN); // the feeder's write fails with EPIPE instead when the copy stops early
  const std::string data(200000, 'd');
  auto copy_from_pipe = [&](const std::string& name) {
    int p[2];
    EXPECT_EQ(::pipe(p), 0);
    UniqueFd rd(p[0]);
    UniqueFd wr(p[1]);
    std::thread feeder([&] {
      (void)!::write(wr.get(), data.data(), data.size()); // EPIPE once the copy gave up
      wr.reset();
    });
    UniqueFd dest = open_dir(dir.path());
    stage::CopyStats stats;
    auto st = stage::copy_file(rd.get(), dest.get(), name, 1ULL << 30, stats, "data/stream");
    rd.reset(); // unblocks the feeder if the copy stopped early
    feeder.join();
    return st;
  };
  {
    Flaky flaky;
    fs::IoHooks hooks = flaky_hooks(flaky);
    hooks.write = [&flaky](int fd, const void* buf, std::size_t len) -> ssize_t {
      return flaky.interrupt() ? -1 : ::write(fd, buf, std::min<std::size_t>(len, 7000));
    };
    HookGuard guard(hooks);
    auto st = copy_from_pipe("ok");
    ASSERT_TRUE(st) << st.error().message;
    EXPECT_GT(flaky.interrupted.load(), 10U);
  }
  EXPECT_EQ(read_file(dir / "ok"), data);
  {
    std::atomic<unsigned> failures{0};
    HookGuard guard(disk_full_hooks(failures));
    auto st = copy_from_pipe("full");
    ASSERT_FALSE(st);
    EXPECT_EQ(st.error().kind, ErrorKind::io);
    EXPECT_EQ(st.error().message, "data/stream: cannot write: No space left on device");
  }
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
