// --stage-out: the grammar, DEST's expansion, the submit-time check and the copy itself.
#include "stagehand/stageout/copy.hpp"
#include "stagehand/stageout/spec.hpp"

#include "test_support.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

using namespace stagehand;
using namespace stagehand::stageout;
namespace fsys = std::filesystem;

namespace {

void write(const std::string& path, const std::string& text)
{
  fsys::create_directories(fsys::path(path).parent_path());
  std::ofstream(path) << text;
}

std::string read(const std::string& path)
{
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

const auto k_forever = std::chrono::steady_clock::now() + std::chrono::hours(1);

EntryResult copy(const test::TempDir& scratch, const std::string& option, const std::string& dest)
{
  auto specs = parse_option(option);
  EXPECT_TRUE(specs) << specs.error().message;
  int fd = ::open(scratch.path().c_str(), O_RDONLY | O_DIRECTORY);
  auto r = copy_entry(fd, specs->at(0), dest, k_forever);
  ::close(fd);
  return r;
}

std::vector<std::string> temp_leftovers(const std::string& dir)
{
  std::vector<std::string> found;
  for (auto& e : fsys::recursive_directory_iterator(dir)) {
    if (e.path().filename().string().starts_with(".stagehand-out.")) {
      found.push_back(e.path());
    }
  }
  return found;
}

} // namespace

TEST(StageOutGrammar, ParsesEntries)
{
  auto s = parse_option("ckpt:runs/%j,out/*.pt,./logs//x:/abs/%n/%j");
  ASSERT_TRUE(s) << s.error().message;
  ASSERT_EQ(s->size(), 3U);
  EXPECT_EQ((*s)[0], (OutSpec{"ckpt", "runs/%j"}));
  EXPECT_EQ((*s)[1], (OutSpec{"out/*.pt", ""}));
  EXPECT_EQ((*s)[2], (OutSpec{"logs/x", "/abs/%n/%j"}));
  EXPECT_FALSE(per_node((*s)[0]));
  EXPECT_TRUE(per_node((*s)[2]));
  EXPECT_FALSE(per_node(OutSpec{"a", "x/%%n"}));
  EXPECT_TRUE(is_glob("out/*.pt"));
  EXPECT_FALSE(is_glob("out/x.pt"));
}

TEST(StageOutGrammar, RefusesBadEntriesWithOneLineNamingThem)
{
  for (const char* bad : {"", "a,,b", "/etc/passwd", "../x", "a/../../x", "a:", ":b", "a:b:c", ".", ".stagehand",
                          "*/x", "a,"}) {
    auto s = parse_option(bad);
    ASSERT_FALSE(s) << bad;
    EXPECT_TRUE(s.error().message.starts_with("--stage-out: ")) << s.error().message;
    EXPECT_EQ(s.error().message.find('\n'), std::string::npos);
  }
  EXPECT_NE(parse_option("/etc/passwd").error().message.find("/etc/passwd"), std::string::npos);
}

TEST(StageOutDest, ExpandsAndResolves)
{
  EXPECT_EQ(dest_path(OutSpec{"ckpt", "runs/%j"}, "/home/u/sub", 42, "n1"), "/home/u/sub/runs/42");
  EXPECT_EQ(dest_path(OutSpec{"ckpt", "/scratch/%n/%j/"}, "/home/u", 42, "n1"), "/scratch/n1/42");
  EXPECT_EQ(dest_path(OutSpec{"out", ""}, "/home/u", 42, "n1"), "/home/u/out");
  EXPECT_EQ(dest_path(OutSpec{"out/*.pt", ""}, "/home/u", 42, "n1"), "/home/u/out");
  EXPECT_EQ(dest_path(OutSpec{"*.pt", ""}, "/home/u", 42, "n1"), "/home/u");
  EXPECT_EQ(dest_path(OutSpec{"a", "100%%/%j"}, "/h", 7, "n"), "/h/100%/7");
  EXPECT_EQ(canonical_option(*parse_option("ckpt:runs/%j,out"), "/home/u"), "ckpt:/home/u/runs/%j,out:/home/u/out");
}

TEST(StageOutSubmitCheck, AcceptsCreatableAndRefusesNonDirectory)
{
  test::TempDir t;
  EXPECT_TRUE(check_at_submit(*parse_option("ckpt:runs/%j/deeper"), t.path()));
  EXPECT_TRUE(check_at_submit(*parse_option("out"), t.path()));
  write(t / "file", "x");
  auto r = check_at_submit(*parse_option("ckpt:file/%j"), t.path());
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find(t / "file"), std::string::npos);
  EXPECT_NE(r.error().message.find("not a directory"), std::string::npos);
  // A file SRC may replace an existing file DEST.
  EXPECT_TRUE(check_at_submit(*parse_option("model.pt:file"), t.path()));
}

TEST(StageOutSubmitCheck, RefusesADirectoryTheUserCannotWrite)
{
  test::TempDir t;
  fsys::create_directories(t / "ro");
  ::chmod((t / "ro").c_str(), 0555);
  ::chmod(t.path().c_str(), 0755);
  const std::string base = t.path();
  int rc = test::run_as_attacker([&] {
    auto r = check_at_submit(*parse_option("ckpt:ro/%j"), base);
    return !r && r.error().message.find(base + "/ro is not writable by you") != std::string::npos;
  });
  EXPECT_EQ(rc, 0);
}

TEST(StageOutCopy, CopiesATreeWithSymlinksAsSymlinks)
{
  test::TempDir scratch, dest;
  write(scratch / "out/a.txt", "alpha");
  write(scratch / "out/sub/b.bin", std::string(100000, 'b'));
  ::symlink("/etc/shadow", (scratch / "out/secret").c_str());
  ::symlink("a.txt", (scratch / "out/rel").c_str());
  auto r = copy(scratch, "out:" + dest / "runs/1", dest / "runs/1");
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.files, 2U);
  EXPECT_EQ(r.bytes, 100005U);
  EXPECT_EQ(r.symlinks, 2U);
  EXPECT_EQ(read(dest / "runs/1/a.txt"), "alpha");
  EXPECT_EQ(read(dest / "runs/1/sub/b.bin").size(), 100000U);
  EXPECT_TRUE(fsys::is_symlink(dest / "runs/1/secret"));
  EXPECT_EQ(fsys::read_symlink(dest / "runs/1/secret"), "/etc/shadow");
  EXPECT_EQ(r.log_dir, dest / "runs/1");
  EXPECT_TRUE(temp_leftovers(dest.path()).empty());
  EXPECT_NE(summary(r).find("2 files, 100005 bytes, 2 symlinks"), std::string::npos) << summary(r);
}

TEST(StageOutCopy, ReplacesFilesWholeAndNeverWritesThroughASymlinkInDest)
{
  test::TempDir scratch, dest, outside;
  write(scratch / "out/a.txt", "new");
  write(outside / "victim", "untouched");
  write(dest / "d/a.txt", "old");
  ::symlink((outside / "victim").c_str(), (dest / "d/b").c_str());
  write(scratch / "out/b", "through?");
  auto r = copy(scratch, "out:" + dest / "d", dest / "d");
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(read(dest / "d/a.txt"), "new");
  EXPECT_EQ(read(outside / "victim"), "untouched");
  EXPECT_FALSE(fsys::is_symlink(dest / "d/b"));
  EXPECT_EQ(read(dest / "d/b"), "through?");
}

TEST(StageOutCopy, GlobAndSingleFile)
{
  test::TempDir scratch, dest;
  write(scratch / "ckpt/1.pt", "1");
  write(scratch / "ckpt/2.pt", "2");
  write(scratch / "ckpt/notes.txt", "n");
  auto r = copy(scratch, "ckpt/*.pt:" + dest / "g", dest / "g");
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.files, 2U);
  EXPECT_TRUE(fsys::exists(dest / "g/1.pt"));
  EXPECT_FALSE(fsys::exists(dest / "g/notes.txt"));
  auto f = copy(scratch, "ckpt/notes.txt:" + dest / "x/renamed.txt", dest / "x/renamed.txt");
  EXPECT_EQ(f.error, "");
  EXPECT_EQ(read(dest / "x/renamed.txt"), "n");
  EXPECT_EQ(f.log_dir, dest / "x");
}

TEST(StageOutCopy, ReportsWhatIsMissingOrNotWritable)
{
  test::TempDir scratch, dest;
  auto r = copy(scratch, "nothing:" + dest / "n", dest / "n");
  EXPECT_NE(r.error.find("nothing"), std::string::npos) << r.error;
  EXPECT_NE(summary(r).find("not copied: "), std::string::npos);
  auto g = copy(scratch, "*.pt:" + dest / "n", dest / "n");
  EXPECT_NE(g.error.find("nothing in $SLURM_TMPDIR matches *.pt"), std::string::npos) << g.error;
  write(scratch / "out/a", "a");
  write(dest / "blocker", "file");
  auto b = copy(scratch, "out:" + dest / "blocker/sub", dest / "blocker/sub");
  EXPECT_NE(b.error.find("blocker"), std::string::npos) << b.error;
  EXPECT_EQ(b.log_dir, "");
}

TEST(StageOutCopy, StopsAtTheDeadlineAndSaysSo)
{
  test::TempDir scratch, dest;
  write(scratch / "out/a", "a");
  auto specs = parse_option("out");
  int fd = ::open(scratch.path().c_str(), O_RDONLY | O_DIRECTORY);
  auto r = copy_entry(fd, specs->at(0), dest / "out", std::chrono::steady_clock::now() - std::chrono::seconds(1));
  ::close(fd);
  EXPECT_NE(r.error.find("time budget"), std::string::npos) << r.error;
  EXPECT_FALSE(fsys::exists(dest / "out/a"));
}

TEST(StageOutLog, AppendsALinePerEntryInDestElseTheFallback)
{
  test::TempDir scratch, dest, fallback;
  write(scratch / "out/a", "a");
  auto r = copy(scratch, "out:" + dest / "o", dest / "o");
  EXPECT_EQ(append_log(r, fallback.path(), 7, "n1"), dest / "o/.stagehand-stage-out.log");
  EXPECT_EQ(append_log(r, fallback.path(), 7, "n1"), dest / "o/.stagehand-stage-out.log");
  const std::string log = read(dest / "o/.stagehand-stage-out.log");
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 2);
  EXPECT_NE(log.find("job 7 node n1: out -> " + dest / "o" + ": 1 file, 1 bytes"), std::string::npos) << log;
  r.log_dir = dest / "gone";
  EXPECT_EQ(append_log(r, fallback.path(), 7, "n1"), fallback / ".stagehand-stage-out.log");
}

TEST(StageOutLog, APlantedFifoNeitherBlocksNorTakesTheLine)
{
  // A FIFO at the log's name would block the open (and the copy, the epilog, the daemon) forever.
  test::TempDir dest, fallback;
  ASSERT_EQ(::mkfifo((dest / ".stagehand-stage-out.log").c_str(), 0644), 0);
  EXPECT_EQ(append_log_line({dest.path(), fallback.path()}, 7, "n1", "x"), fallback / ".stagehand-stage-out.log");
  EXPECT_EQ(append_log_line({dest.path()}, 7, "n1", "x"), "");
}

TEST(StageOutFirstNode, TheMarkerIsARegularFileInTheStateDirectory)
{
  test::TempDir scratch;
  int fd = ::open(scratch.path().c_str(), O_RDONLY | O_DIRECTORY);
  EXPECT_FALSE(is_first_node(fd));
  ::mkdir((scratch / ".stagehand").c_str(), 0700);
  ::symlink("/etc/passwd", (scratch / ".stagehand/stage-out-first-node").c_str());
  EXPECT_FALSE(is_first_node(fd)); // a symlink is not the marker
  ::unlink((scratch / ".stagehand/stage-out-first-node").c_str());
  EXPECT_TRUE(mark_first_node(fd));
  EXPECT_TRUE(mark_first_node(fd)); // every task of the node marks it
  EXPECT_TRUE(is_first_node(fd));
  ::close(fd);
}
