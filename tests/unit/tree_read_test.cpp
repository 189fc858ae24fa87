// A directory source's one read on a daemon miss: the job's copy is what staging without the
// daemon makes (bytes, modes, mtimes, links), the tar stream to the cache unpacks (libarchive) to
// the same tree, a large file takes the pipe path, and a stream whose reader is gone stops the
// stream, never the job's copy.
#include "stagehand/archive/tar_stream.hpp"
#include "stagehand/cache/fill.hpp"
#include "stagehand/cache/key.hpp"
#include "stagehand/cache/tree_read.hpp"

#include "test_support.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include <gtest/gtest.h>

using namespace stagehand;
using namespace stagehand::cache;
using stagehand::test::TempDir;
namespace ar = stagehand::archive; // not libarchive's `struct archive`

namespace {

void run(const std::string& cmd) { ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd; }

UniqueFd open_dir(const std::string& path) { return UniqueFd(::open(path.c_str(), O_RDONLY | O_DIRECTORY)); }

struct stat stat_of(const std::string& path)
{
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st;
}

// A tree with what a dataset holds: a small file, a large one (the pipe path), an empty one, a
// name past ustar's 100 bytes, one not UTF-8, a symlink with a long target, modes of every kind,
// and a FIFO.
void make_tree(const std::string& src, const std::string& long_dir)
{
  run("mkdir -p '" + src + "/sub' '" + src + "/" + long_dir + "' && printf 'small\\n' >'" + src +
      "/sub/a' && chmod 0640 '" + src + "/sub/a' && head -c 3145739 /dev/urandom >'" + src + "/big.bin' && : >'" +
      src + "/empty' && printf deep >'" + src + "/" + long_dir + "/file-with-a-long-name' && ln -s '" + long_dir +
      "/file-with-a-long-name' '" + src + "/link' && mkfifo '" + src + "/fifo' && chmod 0750 '" + src +
      "/sub' && chmod 0555 '" + src + "/" + long_dir + "' && touch -d '2021-03-04 05:06:07.123456789' '" + src +
      "/sub/a'");
  stagehand::test::write_file(src + "/caf\xc3\xa9-\xff", "x"); // a name that is not UTF-8
}

const std::string k_long_dir = std::string(60, 'd') + "/" + std::string(70, 'e');
constexpr std::uint64_t k_tree_bytes = 6U + 3145739U + 4U + 1U; // what make_tree's files hold

// The copy in DEST is the source, but for its FIFO (not staged).
void expect_copied(const TempDir& d)
{
  run("rm -f '" + (d / "src/fifo") + "'");
  run("diff -r --no-dereference '" + (d / "src") + "' '" + (d / "dest") + "'");
}

struct Streamed
{
  Result<TreeRead> read = Error::internal("not run");
  Result<FillResult> fill = Error::internal("not run");
};

// read_tree into `dest` (or none) with the cache's side unpacking the stream into `fill_dir`.
Streamed read_and_fill(const std::string& src, int dest_fd, const std::string& fill_dir, std::uint64_t max,
                       ar::WorkCounters* progress = nullptr)
{
  Streamed out;
  int p[2];
  EXPECT_EQ(::pipe(p), 0);
  UniqueFd src_fd = open_dir(src);
  std::thread reader([&] {
    // A loaded test machine must not make the cache's side look too slow.
    out.read = read_tree(src_fd.get(), dest_fd, p[1], max, src, "src", {{std::chrono::seconds(60), 1.0}, progress});
    ::close(p[1]);
  });
  UniqueFd fill_fd = open_dir(fill_dir);
  out.fill = fill_from_stream(p[0], fill_fd.get(), 1ULL << 30, "src");
  reader.join();
  ::close(p[0]);
  return out;
}

} // namespace

TEST(TarStream, HeadersReadBackByLibarchive)
{
  struct stat st {};
  st.st_mode = S_IFREG | 04751;
  st.st_mtim = {1700000000, 123456789};
  // Past ustar's 100 bytes, and not UTF-8: names are bytes on Linux.
  const std::string long_name = std::string(150, 'n') + "-\xff\xc3\xa9";
  std::string tar = ar::tar_header(ar::TarType::file, "a/b.txt", st, 5) + "hello";
  tar.append(ar::tar_padding(5), '\0');
  tar += ar::tar_header(ar::TarType::directory, "a", st, 0);
  tar += ar::tar_header(ar::TarType::file, long_name, st, 0);
  tar += ar::tar_header(ar::TarType::symlink, "l", st, 0, std::string(200, 't'));
  tar.append(2 * ar::k_tar_block, '\0');
  EXPECT_EQ(tar.size() % ar::k_tar_block, 0U);

  struct archive* a = archive_read_new();
  archive_read_support_format_tar(a);
  ASSERT_EQ(archive_read_open_memory(a, tar.data(), tar.size()), ARCHIVE_OK);
  struct archive_entry* e = nullptr;
  ASSERT_EQ(archive_read_next_header(a, &e), ARCHIVE_OK) << archive_error_string(a);
  EXPECT_STREQ(archive_entry_pathname(e), "a/b.txt");
  EXPECT_EQ(archive_entry_size(e), 5);
  EXPECT_EQ(archive_entry_perm(e), 04751U);
  EXPECT_EQ(archive_entry_filetype(e), static_cast<unsigned>(AE_IFREG));
  EXPECT_EQ(archive_entry_mtime(e), 1700000000);
  char data[8] = {};
  EXPECT_EQ(archive_read_data(a, data, sizeof data), 5);
  EXPECT_STREQ(data, "hello");
  ASSERT_EQ(archive_read_next_header(a, &e), ARCHIVE_OK);
  EXPECT_EQ(archive_entry_filetype(e), static_cast<unsigned>(AE_IFDIR));
  EXPECT_STREQ(archive_entry_pathname(e), "a/");
  ASSERT_EQ(archive_read_next_header(a, &e), ARCHIVE_OK); // a pax header holds the long name
  EXPECT_EQ(archive_entry_pathname(e), long_name);
  EXPECT_EQ(archive_entry_mtime_nsec(e), 123456789); // with the mtime's nanoseconds then
  ASSERT_EQ(archive_read_next_header(a, &e), ARCHIVE_OK);
  EXPECT_EQ(archive_entry_filetype(e), static_cast<unsigned>(AE_IFLNK));
  EXPECT_EQ(std::string(archive_entry_symlink(e)), std::string(200, 't'));
  EXPECT_EQ(archive_read_next_header(a, &e), ARCHIVE_EOF);
  archive_read_free(a);
}

TEST(TreeRead, TheJobsCopyIsStagingsAndTheStreamUnpacksToTheSameTree)
{
  TempDir d;
  make_tree(d / "src", k_long_dir);
  run("mkdir '" + (d / "dest") + "' '" + (d / "fill") + "'");
  UniqueFd dest = open_dir(d / "dest");
  ar::WorkCounters progress;
  auto s = read_and_fill(d / "src", dest.get(), d / "fill", 1ULL << 30, &progress);
  ASSERT_TRUE(s.read) << s.read.error().message;
  EXPECT_EQ(progress.bytes.load(), s.read->copied.bytes);
  EXPECT_EQ(progress.entries.load(), 5U);
  ASSERT_TRUE(s.fill) << s.fill.error().message;
  EXPECT_EQ(s.read->stream_dropped, "");
  EXPECT_FALSE(s.read->streamed.changed);
  EXPECT_EQ(s.read->copied.files, 5U);
  EXPECT_EQ(s.read->copied.bytes, k_tree_bytes);
  EXPECT_EQ(s.read->copied.symlinks, 1U);
  EXPECT_EQ(s.read->copied.skipped_special, 1U);
  UniqueFd src = open_dir(d / "src");
  auto id = identify_tree(src.get(), d / "src", "src");
  ASSERT_TRUE(id);
  EXPECT_EQ(s.read->streamed.identity.key, id->key); // keyed as a hit's identification keys it

  expect_copied(d);
  run("diff -r --no-dereference '" + (d / "src") + "' '" + (d / "fill/data") + "'");
  // What staging without the daemon gives: modes (directories with the owner's rwx), exact mtimes.
  EXPECT_EQ(stat_of(d / "dest/sub/a").st_mode & 07777, 0640U);
  EXPECT_EQ(stat_of(d / "dest/sub/a").st_mtim.tv_nsec, 123456789);
  EXPECT_EQ(stat_of(d / "dest/sub").st_mode & 07777, 0750U);
  EXPECT_EQ(stat_of(d / "dest/" + k_long_dir).st_mode & 07777, 0755U);
  EXPECT_EQ(stat_of(d / "dest/big.bin").st_mtim.tv_nsec, stat_of(d / "src/big.bin").st_mtim.tv_nsec);
  EXPECT_TRUE(S_ISLNK(stat_of(d / "dest/link").st_mode));
  run("chmod -R u+w '" + (d / "src") + "' '" + (d / "dest") + "'");
}

TEST(TreeRead, AStreamWhoseReaderIsGoneStopsTheStreamNeverTheCopy)
{
  TempDir d;
  make_tree(d / "src", k_long_dir);
  run("mkdir '" + (d / "dest") + "'");
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  ::close(p[0]); // the cache's side gave up before the read began
  UniqueFd src = open_dir(d / "src");
  UniqueFd dest = open_dir(d / "dest");
  const std::uint64_t total = k_tree_bytes;
  ar::WorkCounters progress;
  // Room for exactly the tree.
  auto r = read_tree(src.get(), dest.get(), p[1], total, d / "src", "src", {{}, &progress});
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_NE(r->stream_dropped.find("the stream to the cache stopped"), std::string::npos) << r->stream_dropped;
  EXPECT_EQ(r->copied.files, 5U);
  EXPECT_EQ(r->copied.bytes, total);
  EXPECT_EQ(progress.bytes.load(), total); // the daemon's progress for the job (and for jobs waiting on it)
  EXPECT_EQ(progress.entries.load(), 5U);
  expect_copied(d);
  ::close(p[1]);
  // For the cache alone the stream is everything: its failure is the read's.
  ASSERT_EQ(::pipe(p), 0);
  ::close(p[0]);
  auto alone = stream_tree(src.get(), p[1], d / "src", "src");
  EXPECT_FALSE(alone);
  ::close(p[1]);
  run("chmod -R u+w '" + (d / "src") + "' '" + (d / "dest") + "'");
}

TEST(TreeRead, TheCopyKeepsToItsLimit)
{
  TempDir d;
  make_tree(d / "src", k_long_dir);
  run("mkdir '" + (d / "dest") + "' '" + (d / "fill") + "'");
  UniqueFd dest = open_dir(d / "dest");
  auto s = read_and_fill(d / "src", dest.get(), d / "fill", 1U << 20); // big.bin is 3 MiB
  ASSERT_FALSE(s.read);
  EXPECT_EQ(s.read.error().kind, ErrorKind::limit);
  EXPECT_NE(s.read.error().message.find("big.bin"), std::string::npos) << s.read.error().message;
  run("chmod -R u+w '" + (d / "src") + "' '" + (d / "dest") + "'");
}

TEST(TreeRead, ACacheSideSlowerThanTheCopyStopsTheStreamNotTheCopy)
{
  TempDir d;
  make_tree(d / "src", k_long_dir);
  run("mkdir '" + (d / "dest") + "'");
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  // The spool's disk as a slow reader of the stream: 64 KiB every 50 ms.
  std::thread slow([fd = p[0]] {
    char buf[65536];
    while (::read(fd, buf, sizeof buf) > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ::close(fd);
  });
  UniqueFd src = open_dir(d / "src");
  UniqueFd dest = open_dir(d / "dest");
  auto r = read_tree(src.get(), dest.get(), p[1], 1ULL << 30, d / "src", "src", {{std::chrono::milliseconds(0), 0.05}});
  ::close(p[1]);
  slow.join();
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->stream_dropped, "the node cache's disk could not keep up with the job's copy");
  EXPECT_EQ(r->copied.bytes, k_tree_bytes);
  expect_copied(d);
  run("chmod -R u+w '" + (d / "src") + "' '" + (d / "dest") + "'");
}

TEST(TreeRead, ACacheSideThatHangsNeverHoldsTheCopy)
{
  TempDir d;
  make_tree(d / "src", k_long_dir);
  run("mkdir '" + (d / "dest") + "'");
  // The spool's disk hung: the stream's reader is there and never reads. The copy waits at most
  // its patience, then goes on alone; the reader then finds the stream's end at once.
  auto said = stagehand::test::run_with_watchdog(
    [&]() -> std::string {
      int p[2];
      if (::pipe(p) != 0) {
        return "no pipe";
      }
      UniqueFd src = open_dir(d / "src");
      UniqueFd dest = open_dir(d / "dest");
      auto r = read_tree(src.get(), dest.get(), p[1], 1ULL << 30, d / "src", "src",
                         {{std::chrono::milliseconds(300), 0.05}});
      if (!r) {
        return r.error().message;
      }
      char buf[65536];
      while (::read(p[0], buf, sizeof buf) > 0) {
      }
      return r->stream_dropped + " / " + std::to_string(r->copied.files);
    },
    std::chrono::seconds(30));
  ASSERT_TRUE(said) << "the copy hung on the stream";
  EXPECT_EQ(*said, "the node cache's disk could not keep up with the job's copy / 5");
  expect_copied(d);
  run("chmod -R u+w '" + (d / "src") + "' '" + (d / "dest") + "'");
}
