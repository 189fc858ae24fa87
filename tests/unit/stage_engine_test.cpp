// The staging engine against what a job and its user can do meanwhile: files the job made are
// never deleted, a FIFO or a symlinked parent swapped in after the checks is refused at once, no
// exception leaves it, and any dataset shape stages with a few descriptors.
#include "stagehand/cache/fill.hpp"
#include "stagehand/cache/key.hpp"
#include "stagehand/cache/materialise.hpp"
#include "stagehand/cache/source.hpp"
#include "stagehand/cache/tree_read.hpp"
#include "stagehand/stage/request.hpp"
#include "stagehand/stage/run.hpp"
#include "stagehand/stage/spec.hpp"
#include "stagehand/util/fd.hpp"

#include "test_support.hpp"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

using namespace stagehand;
using namespace stagehand::stage;
using namespace stagehand::test;

namespace {

int sh(const std::string& cmd) { return std::system(("set -e; " + cmd).c_str()); }

bool empty_dir(const std::string& path) { return sh("test -z \"$(ls -A '" + path + "')\"") == 0; }

// A job's node: sources under data/, the job's directory tmp/.
struct Job
{
  TempDir dir;
  UniqueFd tmp;
  Job()
  {
    sh("mkdir -p '" + dir / "tmp" + "' '" + dir / "data/tree/sub" + "' && echo t > '" + dir / "data/tree/sub/f" +
       "' && head -c 3000000 /dev/urandom > '" + dir / "data/big.bin" + "' && echo s > '" + dir / "data/small.bin" +
       "' && tar cf '" + dir / "data/pack.tar" + "' -C '" + dir / "data" + "' tree");
    tmp.reset(::open((dir / "tmp").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  }
  std::vector<CheckedSource> check(const std::string& option, const StageConfig& config = {}) const
  {
    auto sources = check_sources(*parse_stage_option(option), dir.path(), config, [](int) { return true; });
    EXPECT_TRUE(sources) << sources.error().message;
    return sources ? *sources : std::vector<CheckedSource>{};
  }
  Result<std::vector<std::string>> stage(const std::vector<CheckedSource>& sources, const StageLimits& limits = {}) const
  {
    return stage_all(sources, tmp.get(), dir / "tmp", limits);
  }
};

} // namespace

// Issue 10, item 6: a step stages onto a path the job already wrote. Refused with one line naming
// it, the job's file and directories stay, and only what this run created is rolled back.
TEST(StageEngine, NeverDeletesWhatTheJobMade)
{
  Job j;
  sh("mkdir -p '" + j.dir / "tmp/data/mydir" + "' && echo mine > '" + j.dir / "tmp/data/small.bin" + "'");
  auto file = j.stage(j.check("data/tree:fresh,data/small.bin"));
  ASSERT_FALSE(file);
  EXPECT_EQ(file.error().message, "--stage-data: data/small.bin: $SLURM_TMPDIR/data/small.bin already exists: refused "
                                  "(staging never replaces what the job made)");
  EXPECT_EQ(read_file(j.dir / "tmp/data/small.bin"), "mine\n");
  EXPECT_FALSE(exists_nofollow(j.dir / "tmp/fresh")); // this run's: rolled back
  auto dir = j.stage(j.check("data/pack.tar:data/mydir"));
  ASSERT_FALSE(dir);
  EXPECT_NE(dir.error().message.find("$SLURM_TMPDIR/data/mydir already exists"), std::string::npos);
  EXPECT_TRUE(exists_nofollow(j.dir / "tmp/data/mydir"));
  // A failure after this run created files beside the job's: only this run's go.
  auto later = j.stage(j.check("data/small.bin:data/copy.bin,data/tree:data/t2/x,data/big.bin:data/mydir/big.bin"),
                       StageLimits{1000, 1, {}});
  ASSERT_FALSE(later);
  EXPECT_EQ(later.error().kind, ErrorKind::limit);
  EXPECT_FALSE(exists_nofollow(j.dir / "tmp/data/copy.bin"));
  EXPECT_FALSE(exists_nofollow(j.dir / "tmp/data/t2"));
  EXPECT_FALSE(exists_nofollow(j.dir / "tmp/data/mydir/big.bin"));
  EXPECT_EQ(read_file(j.dir / "tmp/data/small.bin"), "mine\n");
  EXPECT_TRUE(exists_nofollow(j.dir / "tmp/data/mydir"));
}

// The daemon's rollback of a delivery removes what the delivery says it created, as it created it:
// the outermost name it made (a parent only when the delivery made it), with its inode, so that a
// directory another step of the job made meanwhile is never taken for the delivery's.
TEST(StageEngine, ADeliveryReportsTheOutermostNameItCreated)
{
  Job j;
  auto inode = [&](const std::string& rel) {
    struct stat st {};
    EXPECT_EQ(::fstatat(j.tmp.get(), rel.c_str(), &st, AT_SYMLINK_NOFOLLOW), 0) << rel;
    return CreatedName{rel, st.st_dev, st.st_ino};
  };
  struct stat st {};
  UniqueFd in(::open((j.dir / "data/small.bin").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_EQ(::fstat(in.get(), &st), 0);
  auto fresh = deliver(in.get(), StreamContent::plain_file, st, DeliverTo{j.tmp.get(), "new/deeper/s.bin", 1 << 20},
                       "data/small.bin");
  ASSERT_TRUE(fresh) << fresh.error().message;
  EXPECT_EQ(fresh->created, inode("new")); // both parents were made: the outer one
  sh("mkdir '" + j.dir / "tmp/theirs" + "'"); // another step's
  UniqueFd again(::open((j.dir / "data/small.bin").c_str(), O_RDONLY | O_CLOEXEC));
  auto beside = deliver(again.get(), StreamContent::plain_file, st, DeliverTo{j.tmp.get(), "theirs/s.bin", 1 << 20},
                        "data/small.bin");
  ASSERT_TRUE(beside) << beside.error().message;
  EXPECT_EQ(beside->created, inode("theirs/s.bin"));
  UniqueFd tar(::open((j.dir / "data/pack.tar").c_str(), O_RDONLY | O_CLOEXEC));
  ASSERT_EQ(::fstat(tar.get(), &st), 0);
  auto unpacked =
    deliver(tar.get(), StreamContent::archive, st, DeliverTo{j.tmp.get(), "theirs/pack", 1 << 20}, "data/pack.tar");
  ASSERT_TRUE(unpacked) << unpacked.error().message;
  EXPECT_EQ(unpacked->created, inode("theirs/pack"));
  auto copied = deliver_dir(DeliverTo{j.tmp.get(), "theirs/d", 0}, [](int) -> Result<Delivered> { return Delivered{}; });
  ASSERT_TRUE(copied) << copied.error().message;
  EXPECT_EQ(copied->created, inode("theirs/d"));
}

// Issue 10, item 8: a source swapped for a FIFO after the checks (while an earlier source stages)
// is refused at once with one line; opening it never waits for a writer.
TEST(StageEngine, AFifoSwappedInIsRefusedAtOnce)
{
  Job j;
  auto sources = j.check("data/big.bin,data/small.bin");
  ASSERT_EQ(::unlink((j.dir / "data/small.bin").c_str()), 0);
  ASSERT_EQ(::mkfifo((j.dir / "data/small.bin").c_str(), 0644), 0);
  auto said = run_with_watchdog(
    [&] {
      auto r = j.stage(sources);
      return r ? std::string("staged") : r.error().message;
    },
    std::chrono::seconds(60));
  ASSERT_TRUE(said) << "staging hung on a FIFO";
  EXPECT_EQ(*said, "--stage-data: data/small.bin: is a FIFO, device or socket, not a file or directory: refused");
  EXPECT_TRUE(empty_dir(j.dir / "tmp")) << "partial data left behind";
  // The submit-time check opens it the same way, with the same words.
  auto at_submit = check_sources(*parse_stage_option("data/small.bin"), j.dir.path(), StageConfig{});
  ASSERT_FALSE(at_submit);
  EXPECT_EQ(at_submit.error().message,
            "--stage-data: data/small.bin: is a FIFO, device or socket, not a file or directory: refused (relative to " +
              j.dir.path() + ")");
  // A symlink swapped in is not followed either.
  ::unlink((j.dir / "data/small.bin").c_str());
  ASSERT_EQ(::symlink("/etc/hostname", (j.dir / "data/small.bin").c_str()), 0);
  auto link = j.stage(sources);
  ASSERT_FALSE(link);
  EXPECT_EQ(link.error().message, "--stage-data: data/small.bin: is a symlink now, not what was checked: refused");
}

// Issue 10, item 10: allowed_roots is checked on what the node really opens. A parent directory
// swapped for a symlink to elsewhere after the check is refused, and nothing of elsewhere staged.
TEST(StageEngine, AllowedRootsHoldForWhatIsOpened)
{
  Job j;
  sh("mkdir -p '" + j.dir / "allowed/sub/ds" + "' '" + j.dir / "outside/ds" + "' && echo ok > '" +
     j.dir / "allowed/sub/ds/f" + "' && echo secret > '" + j.dir / "outside/ds/secret" + "'");
  StageConfig config;
  config.allowed_roots = {j.dir / "allowed"};
  auto sources = j.check("allowed/sub/ds", config);
  ASSERT_EQ(sources.size(), 1U);
  ASSERT_EQ(::rename((j.dir / "allowed/sub").c_str(), (j.dir / "allowed/sub.real").c_str()), 0);
  ASSERT_EQ(::symlink((j.dir / "outside").c_str(), (j.dir / "allowed/sub").c_str()), 0);
  StageLimits limits;
  limits.allowed_roots = config.allowed_roots;
  auto r = j.stage(sources, limits);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "--stage-data: allowed/sub/ds: " + j.dir / "outside/ds" + " is not under [stage] allowed_roots");
  EXPECT_TRUE(empty_dir(j.dir / "tmp"));
}

// A dataset with another filesystem mounted inside is refused at submission, naming the mount,
// never staged with a hole where the mount was (in the job, or by the daemon's user side).
TEST(StageEngine, AMountInsideASourceIsRefusedNotSkipped)
{
  STAGEHAND_REQUIRE_ROOT();
  Job j;
  ::mkdir((j.dir / "data/tree/mnt").c_str(), 0755);
  ASSERT_EQ(::mount("none", (j.dir / "data/tree/mnt").c_str(), "tmpfs", 0, "size=1m"), 0);
  write_file(j.dir / "data/tree/mnt/inside", "x");
  auto r = check_sources(*parse_stage_option("data/tree"), j.dir.path(), StageConfig{});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "--stage-data: data/tree: data/tree/mnt: another filesystem is mounted there: not "
                               "entered (relative to " + j.dir.path() + ")");
  UniqueFd src(::open((j.dir / "data/tree").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  auto id = cache::identify_tree(src.get(), j.dir / "data/tree", "data/tree");
  ASSERT_FALSE(id);
  EXPECT_NE(id.error().message.find("mnt: another filesystem is mounted there"), std::string::npos) << id.error().message;
  ::umount2((j.dir / "data/tree/mnt").c_str(), MNT_DETACH);
}

// Issue 10, item 12: an allocation that fails anywhere in staging is an error (one line, "out of
// memory") with nothing partial left, never an exception that ends the helper.
TEST(StageEngine, OutOfMemoryIsAnErrorAndLeavesNothing)
{
  Job j;
  auto sources = j.check("data/tree,data/small.bin,data/pack.tar:unpacked");
  const std::string tmp_path = j.dir / "tmp";
  StageLimits limits;
  limits.writer_threads = 1; // every allocation on this thread
  std::uint64_t failures_seen = 0;
  for (std::uint64_t n = 1;; ++n) {
    std::optional<Result<std::vector<std::string>>> r;
    bool escaped = false;
    fail_nth_allocation(n);
    try {
      r.emplace(stage_all(sources, j.tmp.get(), tmp_path, limits));
    } catch (...) {
      escaped = true;
    }
    const bool used = allocation_failure_used();
    fail_nth_allocation(0);
    ASSERT_FALSE(escaped) << "an exception left stage_all at allocation " << n;
    if (!used) { // past the last allocation: a normal run
      ASSERT_TRUE(*r) << r->error().message;
      EXPECT_EQ(read_file(j.dir / "tmp/unpacked/tree/sub/f"), "t\n");
      break;
    }
    ++failures_seen;
    ASSERT_FALSE(*r) << "allocation " << n << " failed but staging reported success";
    EXPECT_NE((*r).error().message.find("out of memory"), std::string::npos) << (*r).error().message;
    ASSERT_TRUE(empty_dir(j.dir / "tmp")) << "partial data left after allocation " << n << " failed";
  }
  EXPECT_GT(failures_seen, 10U);
}

// Issue 10, item 12: the staging helper's own limits, whatever slurmstepd's were.
TEST(StageEngine, TheHelperSetsItsOwnLimits)
{
  auto said = run_with_watchdog(
    [] {
      struct rlimit core {};
      ::getrlimit(RLIMIT_CORE, &core);
      core.rlim_cur = core.rlim_max; // as a user who asked for core dumps
      ::setrlimit(RLIMIT_CORE, &core);
      struct rlimit many {20000, 20000};
      ::setrlimit(RLIMIT_NOFILE, &many);
      if (set_helper_limits() != 0) {
        return std::string("failed");
      }
      struct rlimit nofile {};
      ::getrlimit(RLIMIT_NOFILE, &nofile);
      ::getrlimit(RLIMIT_CORE, &core);
      std::string out = std::to_string(nofile.rlim_cur) + " " + std::to_string(core.rlim_cur) + " " +
                        std::to_string(core.rlim_max);
      struct rlimit few {256, 256}; // a user's lower hard limit stays
      ::setrlimit(RLIMIT_NOFILE, &few);
      set_helper_limits();
      ::getrlimit(RLIMIT_NOFILE, &nofile);
      return out + " " + std::to_string(nofile.rlim_cur);
    },
    std::chrono::seconds(30));
  ASSERT_TRUE(said);
  EXPECT_EQ(*said, std::to_string(k_helper_open_files) + " 0 0 256");
}

// Issue 10, item 7: 25,000 directories (ImageNet-21k has 21,841 class folders) and 500-deep chains
// (one longer than PATH_MAX, copied in the job only: an archive entry name stops at 4096 bytes):
// checked, copied, unpacked and cached under `ulimit -n 256`.
TEST(StageEngine, AnyShapeStagesWithFewDescriptors)
{
  STAGEHAND_REQUIRE_ROOT(); // the cache's side chowns what it links into the job
  Job j;
  ASSERT_EQ(sh("cd '" + j.dir / "data" + "' && mkdir wide && cd wide && for i in $(seq 1 250); do mkdir c$i; "
               "(cd c$i && mkdir $(seq -f 'n%03g' 1 100) && echo x > n001/f); done"),
            0);
  ASSERT_EQ(sh("cd '" + j.dir / "data" + "' && /usr/bin/python3 -c \"import os\nfor top, name in (('deep', 'd'), "
               "('deeper', 'level_{}')):\n  os.chdir('" + j.dir / "data" + "'); os.mkdir(top); os.chdir(top)\n"
               "  for i in range(1, 501): os.mkdir(name.format(i)); os.chdir(name.format(i))\n"
               "  open('f', 'w').write('bottom')\" && tar cf deep.tar deep wide"),
            0);
  auto said = run_with_watchdog(
    [&]() -> std::string {
      struct rlimit few {256, 256};
      ::setrlimit(RLIMIT_NOFILE, &few);
      auto sources = check_sources(*parse_stage_option("data/wide,data/deep,data/deeper,data/deep.tar:unpacked"), j.dir.path(),
                                   StageConfig{}, [](int) { return true; });
      if (!sources) {
        return "check: " + sources.error().message;
      }
      StageLimits limits;
      limits.writer_threads = 4;
      auto lines = j.stage(*sources, limits);
      if (!lines) {
        return "stage: " + lines.error().message;
      }
      // The daemon's way: the user side identifies and streams the tree, the service side unpacks
      // it into the cache, root links it into the job's directory.
      for (const std::string name : {"deep", "wide"}) {
        UniqueFd src(::open((j.dir / ("data/" + name)).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        if (auto id = cache::identify_tree(src.get(), j.dir / ("data/" + name), name); !id) {
          return "identify: " + id.error().message;
        }
        ::mkdir((j.dir / ("fill-" + name)).c_str(), 0700);
        UniqueFd fill(::open((j.dir / ("fill-" + name)).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
        int p[2];
        if (::pipe(p) != 0) {
          return "pipe";
        }
        std::string streamed;
        std::thread user([&] {
          auto s = cache::stream_tree(src.get(), p[1], j.dir / ("data/" + name), name);
          streamed = s ? "" : s.error().message;
          ::close(p[1]);
        });
        auto filled = cache::fill_from_stream(p[0], fill.get(), 1ULL << 30, name);
        user.join();
        ::close(p[0]);
        if (!filled || !streamed.empty()) {
          return "fill: " + (filled ? streamed : filled.error().message);
        }
        auto placed = cache::materialise(fill.get(), "data", j.tmp.get(), "cached/" + name, cache::JobUser{0, 0});
        if (!placed) {
          return "materialise: " + placed.error().message;
        }
      }
      return std::string("ok");
    },
    std::chrono::seconds(600));
  ASSERT_TRUE(said);
  ASSERT_EQ(*said, "ok");
  // diff cannot follow paths longer than PATH_MAX; find can: same entries, types, sizes, modes.
  auto listing = [&](const std::string& rel) {
    return sh("cd '" + j.dir / rel + "' && find . -printf '%y %s %m %p\\n' | sort > '" + j.dir / "listing" + "'") == 0
             ? read_file(j.dir / "listing")
             : std::string("find failed in ") + rel;
  };
  const std::string deep = listing("data/deep");
  const std::string deeper = listing("data/deeper"); // longer than PATH_MAX
  const std::string wide = listing("data/wide");
  EXPECT_GT(deeper.find("level_500/f"), std::size_t{4096}); // the last line is its longest path
  EXPECT_GT(wide.size(), 25000U * 10);
  EXPECT_EQ(listing("tmp/data/wide"), wide);
  EXPECT_EQ(listing("tmp/data/deep"), deep);
  EXPECT_EQ(listing("tmp/data/deeper"), deeper);
  EXPECT_EQ(listing("tmp/unpacked/deep"), deep);
  EXPECT_EQ(listing("tmp/unpacked/wide"), wide);
  EXPECT_EQ(sh("diff -r '" + j.dir / "data/wide" + "' '" + j.dir / "tmp/data/wide" + "'"), 0);
}
