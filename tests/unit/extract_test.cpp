// Archive extraction: every format from real tools round-trips; every hostile archive is refused
// or neutralised with nothing written outside the destination (checked as root).
#include "stagehand/archive/extract.hpp"
#include "stagehand/util/fd.hpp"

#include "test_support.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdlib>

using namespace stagehand;
using namespace stagehand::archive;
using namespace stagehand::test;

namespace {

int sh(const std::string& cmd) { return std::system(("set -e; " + cmd).c_str()); }

// A destination, an "outside" directory with a sentinel, and the archives directory.
struct Sandbox
{
  TempDir dir;
  std::string dest = dir / "dest";
  std::string outside = dir / "outside";
  std::string archives = dir / "archives";
  Sandbox()
  {
    sh("mkdir -p '" + dest + "' '" + outside + "' '" + archives + "'");
    write_file(outside + "/sentinel", "root's");
  }
  Result<ExtractStats> extract(const std::string& archive, ExtractLimits limits = {}) const
  {
    UniqueFd in(::open(archive.c_str(), O_RDONLY | O_CLOEXEC));
    UniqueFd out(::open(dest.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    return extract_archive(in.get(), out.get(), limits, archive.substr(archive.rfind('/') + 1));
  }
  ArchiveKind probe(const std::string& file) const
  {
    UniqueFd in(::open(file.c_str(), O_RDONLY | O_CLOEXEC));
    return *probe_archive(in.get());
  }
  void expect_outside_untouched() const
  {
    EXPECT_EQ(read_file(outside + "/sentinel"), "root's");
    EXPECT_EQ(sh("test \"$(ls -A '" + outside + "')\" = sentinel"), 0) << "something was written outside";
    EXPECT_FALSE(exists_nofollow(dir / "escaped"));
  }
};

struct Hostile : Sandbox
{
  Hostile()
  {
    EXPECT_EQ(sh("python3 '" STAGEHAND_TEST_DATA "/hostile_archives.py' '" + archives + "' '" + outside + "'"), 0);
  }
  // Extracts a hostile archive; returns the error message ("" when it succeeded).
  std::string attack(const std::string& name, ExtractLimits limits = {})
  {
    auto r = extract(archives + "/" + name, limits);
    expect_outside_untouched();
    return r ? std::string() : r.error().message;
  }
};

void make_source_tree(const std::string& src)
{
  sh("mkdir -p '" + src + "/sub/deeper' '" + src + "/empty_dir'");
  write_file(src + "/top.txt", "top level\n");
  write_file(src + "/sub/data.bin", std::string(100000, 'z') + "end");
  write_file(src + "/sub/deeper/leaf", "leaf\n");
  write_file(src + "/empty", "");
  sh("chmod 0750 '" + src + "/sub/deeper/leaf'; ln -s ../top.txt '" + src + "/sub/link'; ln '" + src + "/top.txt' '" +
     src + "/hard'; touch -d @1577934245 '" + src + "/top.txt'");
}

} // namespace

TEST(Extract, EveryFormatFromRealToolsRoundTrips)
{
  STAGEHAND_REQUIRE_ROOT();
  Sandbox box;
  const std::string src = box.dir / "src";
  make_source_tree(src);
  const std::string a = box.archives;
  ASSERT_EQ(sh("cd '" + src + "' && tar cf '" + a + "/t.tar' . && tar czf '" + a + "/t.tar.gz' . && tar cjf '" + a +
               "/t.tar.bz2' . && tar cJf '" + a + "/t.tar.xz' . && tar --zstd -cf '" + a + "/t.tar.zst' . && bsdtar -cf '" +
               a + "/t.pax' --format=pax . && bsdtar -czf '" + a + "/t.bsd.tgz' . && zip -qry --symlinks '" + a +
               "/t.zip' ."),
            0);
  for (unsigned threads : {1U, 3U}) // the reader writing everything, and writer threads
  for (const char* name : {"t.tar", "t.tar.gz", "t.tar.bz2", "t.tar.xz", "t.tar.zst", "t.pax", "t.bsd.tgz", "t.zip"}) {
    SCOPED_TRACE(std::string(name) + " with writer_threads=" + std::to_string(threads));
    sh("rm -rf '" + box.dest + "' && mkdir '" + box.dest + "'");
    EXPECT_EQ(box.probe(a + "/" + name), ArchiveKind::archive);
    ExtractLimits limits;
    limits.writer_threads = threads;
    auto r = box.extract(a + "/" + name, limits);
    ASSERT_TRUE(r) << r.error().message;
    EXPECT_EQ(sh("diff -r --no-dereference '" + src + "' '" + box.dest + "'"), 0);
    EXPECT_EQ(r->files + r->hardlinks, 5U);
    EXPECT_EQ(r->symlinks, 1U);
    EXPECT_EQ(r->bytes, 100003U + 10U * (std::string(name) == "t.zip" ? 2U : 1U) + 5U);
    struct stat st {};
    ASSERT_EQ(::stat((box.dest + "/sub/deeper/leaf").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0750U);
    ASSERT_EQ(::stat((box.dest + "/top.txt").c_str(), &st), 0);
    EXPECT_EQ(st.st_mtime, 1577934245) << "mtime not kept";
  }
}

TEST(Extract, ContentDecidesNotTheName)
{
  Hostile box;
  EXPECT_EQ(box.probe(box.archives + "/plain.txt"), ArchiveKind::not_an_archive);
  EXPECT_EQ(box.probe(box.archives + "/data.csv.gz"), ArchiveKind::not_an_archive);
  EXPECT_EQ(box.probe(box.archives + "/empty"), ArchiveKind::not_an_archive);
  EXPECT_EQ(box.probe(box.archives + "/owner.tar"), ArchiveKind::archive);
  sh("cp '" + box.archives + "/owner.tar' '" + box.archives + "/renamed.bin'");
  EXPECT_EQ(box.probe(box.archives + "/renamed.bin"), ArchiveKind::archive);
}

TEST(ExtractHostile, DotDotAndAbsoluteNamesAreRefused)
{
  STAGEHAND_REQUIRE_ROOT();
  Hostile box;
  EXPECT_NE(box.attack("dotdot.tar").find("\"../escaped\": \"..\" in name"), std::string::npos);
  EXPECT_NE(box.attack("deep-dotdot.tar").find("\"..\" in name"), std::string::npos);
  EXPECT_NE(box.attack("absolute.tar").find("absolute name"), std::string::npos);
  EXPECT_NE(box.attack("dotdot.zip").find("\"..\" in name"), std::string::npos);
  EXPECT_NE(box.attack("absolute.zip").find("absolute name"), std::string::npos);
}

TEST(ExtractHostile, NoWriteThroughASymlinkFromAnEarlierEntry)
{
  STAGEHAND_REQUIRE_ROOT();
  Hostile box;
  for (const char* name : {"symlink-then-write.tar", "symlink-dotdot-then-write.tar", "symlink-chain.tar"}) {
    SCOPED_TRACE(name);
    sh("rm -rf '" + box.dest + "' && mkdir '" + box.dest + "'");
    EXPECT_NE(box.attack(name).find("is a symlink or a file, not a directory: refused"), std::string::npos);
  }
}

TEST(ExtractHostile, HardLinksMustPointAtFilesInsideTheArchive)
{
  STAGEHAND_REQUIRE_ROOT();
  Hostile box;
  EXPECT_NE(box.attack("hardlink-outside.tar").find("target outside the archive: refused"), std::string::npos);
  EXPECT_NE(box.attack("hardlink-absolute.tar").find("target outside the archive: refused"), std::string::npos);
  EXPECT_NE(box.attack("hardlink-via-symlink.tar").find("not a file unpacked earlier: refused"), std::string::npos);
  struct stat st {};
  ASSERT_EQ(::stat((box.outside + "/sentinel").c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 1U) << "the sentinel gained a hard link";
}

TEST(ExtractHostile, ALaterEntryReplacesASymlinkInsteadOfWritingThroughIt)
{
  STAGEHAND_REQUIRE_ROOT();
  Hostile box;
  EXPECT_EQ(box.attack("replace-with-symlink.tar"), "");
  struct stat st {};
  ASSERT_EQ(::lstat((box.dest + "/a").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(read_file(box.dest + "/a"), "second");
}

TEST(ExtractHostile, NoDevicesNoFifosNoSetuidNoOwnership)
{
  STAGEHAND_REQUIRE_ROOT();
  Hostile box;
  auto r = box.extract(box.archives + "/devices.tar");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->skipped_special, 3U);
  EXPECT_FALSE(exists_nofollow(box.dest + "/null"));
  EXPECT_FALSE(exists_nofollow(box.dest + "/blk"));
  EXPECT_FALSE(exists_nofollow(box.dest + "/fifo"));
  EXPECT_TRUE(exists_nofollow(box.dest + "/regular"));

  ASSERT_TRUE(box.extract(box.archives + "/setuid.tar"));
  for (const char* name : {"suid", "sgid", "sticky"}) {
    struct stat st {};
    ASSERT_EQ(::stat((box.dest + "/" + name).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07000, 0U) << name;
  }
  ASSERT_TRUE(box.extract(box.archives + "/owner.tar"));
  struct stat st {};
  ASSERT_EQ(::stat((box.dest + "/owned").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, ::geteuid()) << "ownership from the archive was restored";
}

TEST(ExtractHostile, LimitsStopBombs)
{
  STAGEHAND_REQUIRE_ROOT();
  Hostile box;
  ExtractLimits limits;
  limits.max_bytes = 10 << 20;
  EXPECT_NE(box.attack("bomb.tar.gz", limits).find("unpacks to more than 10485760 bytes (limit)"), std::string::npos);
  limits = {};
  limits.max_entries = 1000;
  EXPECT_NE(box.attack("many-entries.tar", limits).find("more than 1000 entries (limit)"), std::string::npos);
}

TEST(ExtractHostile, LongNamesDeepNestingAndDirectoryReplacement)
{
  STAGEHAND_REQUIRE_ROOT();
  Hostile box;
  EXPECT_NE(box.attack("long-name.tar").find("name longer than 4096 bytes"), std::string::npos);
  EXPECT_NE(box.attack("deep.tar").find("nested deeper than 1024 levels"), std::string::npos);
  EXPECT_NE(box.attack("dir-then-file.tar").find("would replace a directory: refused"), std::string::npos);
}

TEST(ExtractHostile, CorruptArchiveIsAnErrorNamingIt)
{
  STAGEHAND_REQUIRE_ROOT();
  Hostile box;
  auto msg = box.attack("truncated.tar.gz");
  EXPECT_EQ(msg.rfind("truncated.tar.gz: ", 0), 0U) << msg;
}

// Callers decide by kind: a hostile entry is refused, a bomb hits a limit, a damaged archive is
// corrupt; the archive is named once, in front.
TEST(ExtractHostile, ErrorsCarryTheirKind)
{
  STAGEHAND_REQUIRE_ROOT();
  Hostile box;
  auto kind_of = [&](const std::string& name, ExtractLimits limits = {}) {
    auto r = box.extract(box.archives + "/" + name, limits);
    box.expect_outside_untouched();
    if (r) {
      ADD_FAILURE() << name << " was unpacked";
      return ErrorKind::internal;
    }
    const std::string& msg = r.error().message;
    EXPECT_EQ(msg.rfind(name + ": ", 0), 0U) << msg;
    EXPECT_EQ(msg.find(name, name.size()), std::string::npos) << "named twice: " << msg;
    return r.error().kind;
  };
  EXPECT_EQ(kind_of("dotdot.tar"), ErrorKind::refused);
  EXPECT_EQ(kind_of("symlink-then-write.tar"), ErrorKind::refused);
  EXPECT_EQ(kind_of("hardlink-outside.tar"), ErrorKind::refused);
  EXPECT_EQ(kind_of("dir-then-file.tar"), ErrorKind::refused);
  ExtractLimits limits;
  limits.max_entries = 1000;
  EXPECT_EQ(kind_of("many-entries.tar", limits), ErrorKind::limit);
  limits = {};
  limits.max_bytes = 10 << 20;
  EXPECT_EQ(kind_of("bomb.tar.gz", limits), ErrorKind::limit);
  EXPECT_EQ(kind_of("truncated.tar.gz"), ErrorKind::corrupt);
}

// Issue 10 item 23: Python's tarfile writes a pax header before a non-ASCII first name; libarchive
// reads it with a warning under the C locale (slurmstepd's): still an archive, and unpacked with
// the name's UTF-8 bytes.
TEST(Extract, PaxHeaderFirstEntryIsAnArchive)
{
  Sandbox box;
  const std::string tar = box.archives + "/pax.tar";
  ASSERT_EQ(sh("cd '" + box.archives + "' && python3 -c \"import io, tarfile\n"
               "with tarfile.open('pax.tar', 'w', format=tarfile.PAX_FORMAT) as t:\n"
               "    for name in ('d\\u00e9j\\u00e0-vu.txt', 'plain.txt'):\n"
               "        data = name.encode() + b'\\\\n'\n"
               "        info = tarfile.TarInfo(name); info.size = len(data)\n"
               "        t.addfile(info, io.BytesIO(data))\n\""),
            0);
  ASSERT_EQ(sh("head -c 512 '" + tar + "' | grep -q 'PaxHeader\\|path='"), 0) << "no pax header first";
  EXPECT_EQ(box.probe(tar), ArchiveKind::archive);
  auto stats = box.extract(tar);
  ASSERT_TRUE(stats) << stats.error().message;
  EXPECT_EQ(stats->files, 2U);
  EXPECT_EQ(read_file(box.dest + "/d\xc3\xa9j\xc3\xa0-vu.txt"), "d\xc3\xa9j\xc3\xa0-vu.txt\n");
  EXPECT_EQ(read_file(box.dest + "/plain.txt"), "plain.txt\n");
}

// Writer threads write small files in batches, out of archive order: whatever touches a path a
// batch may still be writing (the same name again, a directory below it, a hard link to it) must
// see exactly what the reader writing everything in order sees. Each conflicting entry follows a
// file still in the batch being built (the last of 300 in a directory), so a missed check fails
// every time, not by chance.
TEST(Extract, WriterThreadsKeepArchiveOrderWhereItMatters)
{
  STAGEHAND_REQUIRE_ROOT();
  Sandbox box;
  const std::string a = box.archives;
  ASSERT_EQ(sh("python3 - '" + a + "' <<'PY'\n"
               "import io, sys, tarfile\n"
               "def add(t, name, data=None, kind=tarfile.REGTYPE, link=''):\n"
               "    i = tarfile.TarInfo(name); i.type = kind; i.linkname = link; i.mode = 0o644\n"
               "    if data is not None: i.size = len(data)\n"
               "    t.addfile(i, io.BytesIO(data) if data is not None else None)\n"
               "def filler(t, d):\n"
               "    for n in range(300): add(t, f'{d}/f{n}', b'x' * n)\n"
               "def archive(name, *entries):\n"
               "    with tarfile.open(sys.argv[1] + '/' + name, 'w') as t:\n"
               "        for e in entries: e(t)\n"
               "archive('symlink-over-file.tar', lambda t: filler(t, 'e'),\n"
               "        lambda t: add(t, 'e/f299', kind=tarfile.SYMTYPE, link='f6'))\n"
               "archive('link-to-file.tar', lambda t: filler(t, 'd'), lambda t: add(t, 'd/x', b'mine'),\n"
               "        lambda t: add(t, 'd/h', kind=tarfile.LNKTYPE, link='d/x'))\n"
               "archive('same-name.tar', lambda t: filler(t, 'd'), lambda t: add(t, 'd/f299', b'second'))\n"
               "archive('below-a-file.tar', lambda t: filler(t, 'd'), lambda t: add(t, 'd/f299/q', b'below it'))\n"
               "archive('dir-over-file.tar', lambda t: filler(t, 'd'), lambda t: add(t, 'd/f299', kind=tarfile.DIRTYPE))\n"
               "archive('odd-name.tar', lambda t: filler(t, 'd'), lambda t: add(t, '\\x01', b'f'),\n"
               "        lambda t: add(t, '\\x01/y', b'below it'))\n"
               "archive('link-below-a-file.tar', lambda t: filler(t, 'd'), lambda t: add(t, 't', b'f'),\n"
               "        lambda t: add(t, 'h', kind=tarfile.LNKTYPE, link='t/x'))\n"
               "PY"),
            0);
  auto run = [&](const std::string& name, unsigned threads) {
    sh("rm -rf '" + box.dest + "' && mkdir '" + box.dest + "'");
    ExtractLimits limits;
    limits.writer_threads = threads;
    auto r = box.extract(a + "/" + name, limits);
    return r ? std::string("ok") : r.error().message;
  };
  EXPECT_EQ(run("symlink-over-file.tar", 4), "ok");
  struct stat st {};
  ASSERT_EQ(::lstat((box.dest + "/e/f299").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "a later symlink replaces a queued file";
  EXPECT_EQ(run("link-to-file.tar", 4), "ok");
  EXPECT_EQ(read_file(box.dest + "/d/h"), "mine");
  EXPECT_EQ(run("same-name.tar", 4), "ok");
  EXPECT_EQ(read_file(box.dest + "/d/f299"), "second");
  EXPECT_EQ(read_file(box.dest + "/d/f298"), std::string(298, 'x'));
  for (const char* name : {"below-a-file.tar", "dir-over-file.tar", "odd-name.tar", "link-below-a-file.tar"}) {
    SCOPED_TRACE(name);
    const std::string in_order = run(name, 1);
    EXPECT_NE(in_order, "ok");
    EXPECT_EQ(run(name, 4), in_order);
  }
  EXPECT_FALSE(exists_nofollow(box.dest + "/t/x")) << "looking for a hard link's target created a directory";
}

// Entries in the directory of the entry before, spelled the same way, reuse its checked name and
// open handle: every attack below comes after 300 such entries, so the shortcut is in use.
TEST(ExtractHostile, NamesInTheLastDirectoryAreCheckedLikeAnyOther)
{
  STAGEHAND_REQUIRE_ROOT();
  Sandbox box;
  const std::string a = box.archives;
  ASSERT_EQ(sh("python3 - '" + a + "' '" + box.outside + "' <<'PY'\n"
               "import io, sys, tarfile\n"
               "def add(t, name, data=None, kind=tarfile.REGTYPE, link=''):\n"
               "    i = tarfile.TarInfo(name); i.type = kind; i.linkname = link; i.mode = 0o644\n"
               "    if data is not None: i.size = len(data)\n"
               "    t.addfile(i, io.BytesIO(data) if data is not None else None)\n"
               "def archive(name, *last):\n"
               "    with tarfile.open(sys.argv[1] + '/' + name, 'w', format=tarfile.PAX_FORMAT) as t:\n"
               "        for n in range(300): add(t, f'./d/f{n}', b'x')\n"
               "        for name, data, kind, link in last: add(t, name, data, kind, link)\n"
               "R = tarfile.REGTYPE\n"
               "archive('dotdot.tar', ('./d/..', b'x', R, ''))\n"
               "archive('dotdot-below.tar', ('./d/../escaped', b'x', R, ''))\n"
               "archive('long.tar', ('./d/' + 'n' * 4100, b'x', R, ''))\n"
               "archive('symlink-then-below.tar', ('./d/s', None, tarfile.SYMTYPE, sys.argv[2]),\n"
               "        ('./d/s/escaped', b'x', R, ''))\n"
               "archive('spellings.tar', ('d/a', b'a', R, ''), ('d/k', b'k', R, ''), ('./d/b', b'b', R, ''), ('d//c', b'c', R, ''),\n"
               "        ('./d/./e', b'e', R, ''), ('./d/g/', None, tarfile.DIRTYPE, ''), ('./d/g/h', b'h', R, ''),\n"
               "        ('./d/i', b'i', R, ''), ('./j', b'j', R, ''))\n"
               "PY"),
            0);
  for (unsigned threads : {1U, 4U}) {
    SCOPED_TRACE(threads);
    auto run = [&](const std::string& name) {
      sh("rm -rf '" + box.dest + "' && mkdir '" + box.dest + "'");
      ExtractLimits limits;
      limits.writer_threads = threads;
      auto r = box.extract(a + "/" + name, limits);
      box.expect_outside_untouched();
      return r ? std::string("ok") : r.error().message;
    };
    EXPECT_NE(run("dotdot.tar").find("\"..\" in name"), std::string::npos);
    EXPECT_NE(run("dotdot-below.tar").find("\"..\" in name"), std::string::npos);
    EXPECT_NE(run("long.tar").find("name longer than 4096 bytes"), std::string::npos);
    EXPECT_NE(run("symlink-then-below.tar").find("is a symlink or a file, not a directory: refused"),
              std::string::npos);
    ASSERT_EQ(run("spellings.tar"), "ok");
    for (const char* name : {"a", "k", "b", "c", "e", "g/h", "i", "f299"}) {
      EXPECT_TRUE(exists_nofollow(box.dest + "/d/" + name)) << name;
    }
    EXPECT_EQ(read_file(box.dest + "/d/e"), "e");
    EXPECT_EQ(read_file(box.dest + "/j"), "j");
  }
}

// The node cache's fills: files written read-only for everybody as they are unpacked.
TEST(Extract, ReadOnlyModesAreWrittenAtOnce)
{
  STAGEHAND_REQUIRE_ROOT();
  Sandbox box;
  const std::string src = box.dir / "src";
  make_source_tree(src);
  sh("chmod 0666 '" + src + "/empty'");
  ASSERT_EQ(sh("cd '" + src + "' && tar cf '" + box.archives + "/t.tar' ."), 0);
  for (unsigned threads : {1U, 3U}) {
    sh("rm -rf '" + box.dest + "' && mkdir '" + box.dest + "'");
    ExtractLimits limits;
    limits.writer_threads = threads;
    limits.file_modes = FileModes::read_only;
    ASSERT_TRUE(box.extract(box.archives + "/t.tar", limits));
    struct stat st {};
    // The archive's modes without group/other write (a cache view shows them as the job's own).
    ASSERT_EQ(::stat((box.dest + "/sub/deeper/leaf").c_str(), &st), 0); // 0750
    EXPECT_EQ(st.st_mode & 07777, 0750U);
    ASSERT_EQ(::stat((box.dest + "/empty").c_str(), &st), 0); // 0666
    EXPECT_EQ(st.st_mode & 07777, 0644U);
    ASSERT_EQ(::stat((box.dest + "/sub/data.bin").c_str(), &st), 0); // 0644
    EXPECT_EQ(st.st_mode & 07777, 0644U);
    EXPECT_EQ(read_file(box.dest + "/sub/data.bin"), std::string(100000, 'z') + "end");
  }
}
