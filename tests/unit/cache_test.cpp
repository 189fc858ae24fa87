// The node cache: keys that change with any change of the source, the on-disk store, the service
// side's read-only fills, and materialising into a job's directory as root with the job user as
// the attacker.
#include "stagehand/cache/fill.hpp"
#include "stagehand/cache/key.hpp"
#include "stagehand/cache/materialise.hpp"
#include "stagehand/cache/source.hpp"
#include "stagehand/cache/tree_read.hpp"
#include "stagehand/cache/store.hpp"
#include "stagehand/fs/remove_tree.hpp"
#include "stagehand/ipc/child.hpp"
#include "stagehand/ipc/client.hpp"
#include "stagehand/ipc/shared_memory.hpp"

#include "test_support.hpp"

#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <set>
#include <thread>

#include <gtest/gtest.h>

using namespace stagehand;
using namespace stagehand::cache;
using namespace stagehand::test;

namespace {

std::string file_key(const std::string& path)
{
  UniqueFd fd(::open(path.c_str(), O_RDONLY));
  auto id = identify_file(fd.get(), path, stage::Unpack::if_archive);
  EXPECT_TRUE(id);
  return id ? id->key : "";
}

std::string tree_key(const std::string& path)
{
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY));
  auto id = identify_tree(fd.get(), path, path);
  EXPECT_TRUE(id) << (id ? "" : id.error().message);
  return id ? id->key : "";
}

void run(const std::string& cmd) { ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd; }

UniqueFd open_dir(const std::string& path) { return UniqueFd(::open(path.c_str(), O_RDONLY | O_DIRECTORY)); }

} // namespace

TEST(CacheKey, AnyChangeIsAnotherKey)
{
  TempDir d;
  write_file(d / "a.bin", "0123456789");
  const std::string k0 = file_key(d / "a.bin");
  EXPECT_EQ(file_key(d / "a.bin"), k0); // unchanged: the same
  EXPECT_EQ(k0.size(), 64U);
  // A same-size edit with the mtime put back (touch -r) changes ctime.
  run("cp -p '" + (d / "a.bin") + "' '" + (d / "ref") + "' && printf X | dd of='" + (d / "a.bin") +
      "' bs=1 seek=3 conv=notrunc status=none && touch -r '" + (d / "ref") + "' '" + (d / "a.bin") + "'");
  const std::string k1 = file_key(d / "a.bin");
  EXPECT_NE(k1, k0);
  ::usleep(10000);
  ::chmod((d / "a.bin").c_str(), 0600); // ctime again
  const std::string k2 = file_key(d / "a.bin");
  EXPECT_NE(k2, k1);
  // Replaced by rename: another inode.
  run("cp -p '" + (d / "a.bin") + "' '" + (d / "b.bin") + "' && mv '" + (d / "b.bin") + "' '" + (d / "a.bin") + "'");
  EXPECT_NE(file_key(d / "a.bin"), k2);
  // The path and the unpack mode are part of the key.
  UniqueFd fd(::open((d / "a.bin").c_str(), O_RDONLY));
  EXPECT_NE(identify_file(fd.get(), d / "a.bin", stage::Unpack::never)->key,
            identify_file(fd.get(), d / "a.bin", stage::Unpack::if_archive)->key);
  EXPECT_NE(identify_file(fd.get(), d / "other", stage::Unpack::never)->key,
            identify_file(fd.get(), d / "a.bin", stage::Unpack::never)->key);
}

// An entry filled from a broadcast's copy serves its user only: another user's key, and the
// plain key, differ.
TEST(CacheKey, ADeliveredKeyIsTheUsersOwn)
{
  const std::string key(64, 'a');
  EXPECT_EQ(delivered_key(key, 1001), delivered_key(key, 1001));
  EXPECT_NE(delivered_key(key, 1001), delivered_key(key, 1002));
  EXPECT_NE(delivered_key(key, 1001), key);
  EXPECT_NE(delivered_key(key, 1001), delivered_key(std::string(64, 'b'), 1001));
  EXPECT_EQ(delivered_key(key, 1001).size(), 64U);
}

TEST(CacheKey, ADirectoryKeyCoversEveryEntry)
{
  TempDir d;
  run("mkdir -p '" + (d / "t/sub") + "' && echo a >'" + (d / "t/sub/x") + "' && echo b >'" + (d / "t/y") + "'");
  const std::string k0 = tree_key(d / "t");
  EXPECT_EQ(tree_key(d / "t"), k0);
  run("touch -d @5 '" + (d / "t/sub/x") + "'"); // deep inside
  const std::string k1 = tree_key(d / "t");
  EXPECT_NE(k1, k0);
  run("ln -s x '" + (d / "t/sub/l") + "'");
  EXPECT_NE(tree_key(d / "t"), k1);
}

TEST(CacheKey, UnreadableEntriesAreRefusedNamingThem)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir d;
  run("mkdir -p '" + (d / "t/sub") + "' && echo a >'" + (d / "t/sub/x") + "' && chmod -R a+rX '" + d.path() +
      "' && chmod 0600 '" + (d / "t/sub/x") + "'");
  const std::string path = d / "t";
  EXPECT_EQ(run_as_attacker([&] {
              UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY));
              auto id = identify_tree(fd.get(), path, "data/t");
              return !id && id.error().kind == ErrorKind::refused &&
                     id.error().message.find("data/t/sub/x") != std::string::npos;
            }),
            0);
}

TEST(CacheSource, FifosDevicesAndEscapesAreRefusedAtOnce)
{
  TempDir d;
  ASSERT_EQ(::mkfifo((d / "fifo").c_str(), 0644), 0);
  auto fifo = open_source(d / "fifo", "data/x", stage::SourceKind::file); // must not hang
  ASSERT_FALSE(fifo);
  EXPECT_NE(fifo.error().message.find("FIFO"), std::string::npos);
  EXPECT_FALSE(open_source("/dev/null", "dev", stage::SourceKind::file));
  write_file(d / "f", "x");
  EXPECT_FALSE(open_source(d / "f", "f", stage::SourceKind::dir)); // changed kind since submission
  // allowed_roots is checked on where the descriptor really is: a symlinked parent out is refused,
  // and a symlink in the source's own place is never followed.
  ::mkdir((d / "allowed").c_str(), 0755);
  ::symlink(d.path().c_str(), (d / "allowed/link").c_str());
  auto out = open_source(d / "allowed/link/f", "allowed/link/f", stage::SourceKind::file, {d / "allowed"});
  ASSERT_FALSE(out);
  EXPECT_NE(out.error().message.find("allowed_roots"), std::string::npos);
  ::symlink((d / "f").c_str(), (d / "allowed/f").c_str());
  auto swapped = open_source(d / "allowed/f", "allowed/f", stage::SourceKind::file, {d / "allowed"});
  ASSERT_FALSE(swapped);
  EXPECT_EQ(swapped.error().message, "allowed/f: is a symlink now, not what was checked: refused");
  EXPECT_TRUE(open_source(d / "f", "f", stage::SourceKind::file, {d.path()}));
}

TEST(CacheStore, PublishLookupEvictAndSweep)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir d;
  auto store = Store::open(d / "cache");
  ASSERT_TRUE(store) << store.error().message;
  const std::string key(64, 'a');
  EXPECT_EQ(store->lookup(key).error().code, ENOENT);
  auto fill = store->begin_fill(key, k_attacker_uid, k_attacker_gid);
  ASSERT_TRUE(fill);
  write_file(d / ("cache/tmp/" + fill->name + "/data"), std::string(10000, 'x'));
  ASSERT_EQ(::fchownat(fill->dir.get(), "data", k_attacker_uid, k_attacker_gid, 0), 0); // as the filler made it
  EntryMeta meta;
  meta.key = key;
  meta.source = "/src/a";
  meta.kind = stage::SourceKind::file;
  meta.how = stage::Placement::copied;
  meta.files = 1;
  meta.bytes = 10000;
  // Only a key is published: any other name would be an entry no lookup, eviction or gc finds.
  EntryMeta not_a_key = meta;
  not_a_key.key = std::string(64, 'z');
  EXPECT_EQ(store->publish(*fill, not_a_key).error().message, "not a cache key: " + not_a_key.key);
  EXPECT_EQ(store->seal(*fill, not_a_key).error().message, "not a cache key: " + not_a_key.key); // the daemon's way
  EXPECT_TRUE(exists_nofollow(d / ("cache/tmp/" + fill->name + "/data"))); // the fill is still there
  auto pub = store->publish(*fill, meta);
  ASSERT_TRUE(pub) << pub.error().message;
  EXPECT_GE(pub->disk_bytes, 10000U);
  auto found = store->lookup(key);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->source, "/src/a");
  // Read back, the entry occupies what publishing it reported: its data and its manifest.
  EXPECT_EQ(found->disk_bytes, pub->disk_bytes);
  ASSERT_EQ(store->list().size(), 1U);
  // Debris of a fill killed midway and an entry without its manifest are swept; active fills stay.
  auto dead = store->begin_fill(std::string(64, 'b'), 0, 0);
  auto live = store->begin_fill(std::string(64, 'c'), 0, 0);
  ::mkdir((d / ("cache/entries/" + std::string(64, 'd'))).c_str(), 0700);
  auto swept = store->sweep({live->name});
  EXPECT_EQ(swept.size(), 2U);
  EXPECT_TRUE(exists_nofollow(d / ("cache/tmp/" + live->name)));
  EXPECT_FALSE(exists_nofollow(d / ("cache/tmp/" + dead->name)));
  EXPECT_TRUE(store->lookup(key));
  ASSERT_TRUE(store->evict(key));
  EXPECT_FALSE(store->lookup(key));
  EXPECT_TRUE(store->list().empty());
  EXPECT_FALSE(store->evict("../../etc")); // not a key
  // In two steps (the daemon's, around its lock): set aside, no job finds the entry any more, and
  // the sweep leaves it while its name is active; then removed.
  auto again = store->begin_fill(key, 0, 0);
  ASSERT_TRUE(again);
  write_file(d / ("cache/tmp/" + again->name + "/data"), "y");
  auto sealed = store->seal(*again, meta);
  ASSERT_TRUE(sealed) << sealed.error().message;
  EXPECT_FALSE(store->lookup(key)) << "sealed is not published";
  ASSERT_TRUE(store->publish_sealed(*again, *sealed));
  ASSERT_TRUE(store->lookup(key));
  auto aside = store->set_aside(key);
  ASSERT_TRUE(aside) << aside.error().message;
  EXPECT_FALSE(store->lookup(key));
  EXPECT_TRUE(store->sweep({*aside, live->name}).empty());
  EXPECT_TRUE(exists_nofollow(d / ("cache/tmp/" + *aside + "/data")));
  ASSERT_TRUE(store->remove_from_tmp(*aside));
  EXPECT_FALSE(exists_nofollow(d / ("cache/tmp/" + *aside)));
  EXPECT_FALSE(store->set_aside(key)) << "nothing left to set aside";
  // Debris in two steps too (GC's, around the daemon's lock): a broken entry leaves entries/ at
  // once, under a name of its own in tmp/, and nothing is removed until remove_from_tmp.
  auto dead2 = store->begin_fill(std::string(64, 'e'), 0, 0);
  ASSERT_TRUE(dead2);
  const std::string broken = std::string(64, 'f');
  ::mkdir((d / ("cache/entries/" + broken)).c_str(), 0700);
  write_file(d / ("cache/entries/" + broken + "/data"), "z");
  auto debris = store->set_aside_debris({live->name}, store->scan());
  ASSERT_EQ(debris.size(), 2U);
  std::set<std::string> shown;
  for (const auto& x : debris) {
    shown.insert(x.shown);
    EXPECT_TRUE(exists_nofollow(d / ("cache/tmp/" + x.tmp_name))) << x.shown << " not yet removed";
  }
  EXPECT_EQ(shown, (std::set<std::string>{"tmp/" + dead2->name, "entries/" + broken}));
  EXPECT_FALSE(exists_nofollow(d / ("cache/entries/" + broken))) << "a broken entry leaves entries/ at once";
  // While the daemon holds their names as active (until removed), a second sweep leaves them.
  std::set<std::string> active{live->name};
  for (const auto& x : debris) {
    active.insert(x.tmp_name);
  }
  EXPECT_TRUE(store->set_aside_debris(active, store->scan()).empty());
  for (const auto& x : debris) {
    ASSERT_TRUE(store->remove_from_tmp(x.tmp_name));
  }
  EXPECT_TRUE(store->set_aside_debris({live->name}, store->scan()).empty());
  EXPECT_TRUE(exists_nofollow(d / ("cache/tmp/" + live->name)));
  // A good entry whose manifest cannot be read for a passing reason (no descriptor left: EMFILE)
  // is not debris. One free descriptor: enough to list entries/ and open the entry, not its manifest.
  // Published through another Store (this one's index does not know it: it reads its manifest).
  auto other = Store::open(d / "cache");
  ASSERT_TRUE(other);
  auto good = other->begin_fill(key, 0, 0);
  ASSERT_TRUE(good);
  write_file(d / ("cache/tmp/" + good->name + "/data"), "g");
  ASSERT_TRUE(other->publish(*good, meta));
  const auto scanned = store->scan();
  {
    const int lowest_free = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(lowest_free, 0);
    ::close(lowest_free);
    struct rlimit old_limit {};
    ::getrlimit(RLIMIT_NOFILE, &old_limit);
    struct rlimit one_left = old_limit;
    one_left.rlim_cur = static_cast<rlim_t>(lowest_free) + 1;
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &one_left), 0);
    auto starved = store->set_aside_debris({live->name}, scanned);
    ::setrlimit(RLIMIT_NOFILE, &old_limit);
    EXPECT_TRUE(starved.empty()) << starved.front().shown << " set aside for want of a descriptor";
  }
  EXPECT_TRUE(store->lookup(key)) << "the good entry stays published";
  // The cache directory is closed to users.
  struct stat st {};
  ::stat((d / "cache").c_str(), &st);
  EXPECT_EQ(st.st_mode & 077, 0U);
}

TEST(CacheFill, ArchivesUnpackReadOnlyAndTreesStreamIdentical)
{
  TempDir d;
  run("mkdir -p '" + (d / "src/sub") + "' && echo hi >'" + (d / "src/sub/a") + "' && chmod 0764 '" +
      (d / "src/sub/a") + "' && ln -s sub/a '" + (d / "src/l") + "' && tar -C '" + (d / "src") + "' -cf '" +
      (d / "a.tar") + "' .");
  ::mkdir((d / "fill1").c_str(), 0700);
  UniqueFd tar(::open((d / "a.tar").c_str(), O_RDONLY));
  UniqueFd f1 = open_dir(d / "fill1");
  auto r = fill_from_file(tar.get(), f1.get(), stage::Unpack::if_archive, 1 << 20, "a.tar");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->how, stage::Placement::unpacked);
  struct stat st {};
  ASSERT_EQ(::stat((d / "fill1/data/sub/a").c_str(), &st), 0);
  // The archive's modes without group/other write (0764 -> 0744): a cache view shows them as the job's.
  EXPECT_EQ(st.st_mode & 07777, 0744U);
  // :copy keeps an archive packed.
  ::mkdir((d / "fill2").c_str(), 0700);
  UniqueFd f2 = open_dir(d / "fill2");
  auto copied = fill_from_file(tar.get(), f2.get(), stage::Unpack::never, 1 << 20, "a.tar");
  ASSERT_TRUE(copied);
  EXPECT_EQ(copied->how, stage::Placement::copied);
  run("cmp '" + (d / "a.tar") + "' '" + (d / "fill2/data") + "'");
  // A directory streamed by the user side and unpacked by the service side arrives whole.
  ::mkdir((d / "fill3").c_str(), 0700);
  UniqueFd f3 = open_dir(d / "fill3");
  UniqueFd src = open_dir(d / "src");
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  std::thread writer([&] {
    auto s = stream_tree(src.get(), p[1], d / "src", "src");
    EXPECT_TRUE(s);
    EXPECT_FALSE(s->changed);
    EXPECT_EQ(s->identity.key, tree_key(d / "src"));
    ::close(p[1]);
  });
  archive::WorkCounters counters;
  auto streamed = fill_from_stream(p[0], f3.get(), 1 << 20, "src", &counters);
  writer.join();
  ::close(p[0]);
  ASSERT_TRUE(streamed) << streamed.error().message;
  EXPECT_EQ(counters.bytes.load(), 3U);   // "hi\n": what a watcher sees as the fill's progress
  EXPECT_GE(counters.entries.load(), 3U); // sub, sub/a, l (and ".")
  run("diff -r --no-dereference '" + (d / "src") + "' '" + (d / "fill3/data") + "'");
  // The limit holds while writing.
  ::mkdir((d / "fill4").c_str(), 0700);
  UniqueFd f4 = open_dir(d / "fill4");
  auto small = fill_from_file(tar.get(), f4.get(), stage::Unpack::if_archive, 1, "a.tar");
  ASSERT_FALSE(small);
  EXPECT_EQ(small.error().kind, ErrorKind::limit);
}

TEST(CacheFill, AFillInTheServiceUsersChildMakesNothingOthersCouldWrite)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir d;
  // An archive whose modes would let others write: a 0777 directory, a 0666 file, a 0764 one.
  run("mkdir -p '" + (d / "src/open") + "' && echo hi >'" + (d / "src/open/f") + "' && echo ho >'" +
      (d / "src/open/g") + "' && chmod 0777 '" + (d / "src/open") + "' && chmod 0666 '" + (d / "src/open/f") +
      "' && chmod 0764 '" + (d / "src/open/g") + "' && tar -C '" + (d / "src") + "' -cf '" + (d / "a.tar") + "' .");
  ASSERT_EQ(::mkdir((d / "fill").c_str(), 0700), 0);
  ASSERT_EQ(::chown((d / "fill").c_str(), k_attacker_uid, k_attacker_gid), 0);
  UniqueFd tar(::open((d / "a.tar").c_str(), O_RDONLY | O_CLOEXEC));
  UniqueFd fill = open_dir(d / "fill");
  // As the daemon fills: in a child of the service user's, under its filter (which refuses those modes).
  ipc::Credentials service{k_attacker_uid, k_attacker_gid, {k_attacker_gid}, "service user attacker", {}};
  service.filter = ChildFilter::cache_work;
  auto child = ipc::spawn_as(service, {tar.get(), fill.get()}, [](int sock, const std::vector<int>& kept) {
    auto r = fill_from_file(kept[0], kept[1], stage::Unpack::if_archive, 1 << 20, "a.tar");
    (void)ipc::send_message(sock, r ? "filled" : r.error().message);
    return 0;
  });
  ASSERT_TRUE(child) << child.error().message;
  auto said = ipc::receive_message(child->sock(), std::chrono::seconds(30));
  ASSERT_TRUE(said) << said.error().message;
  EXPECT_EQ(said->text, "filled");
  ASSERT_TRUE(child->wait());
  struct stat st {};
  ASSERT_EQ(::stat((d / "fill/data/open").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755U);
  ASSERT_EQ(::stat((d / "fill/data/open/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644U);
  ASSERT_EQ(::stat((d / "fill/data/open/g").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0744U);
  EXPECT_EQ(read_file(d / "fill/data/open/f"), "hi\n");
}

TEST(CacheMaterialise, LinksTheUserCanReadButNeverWrite)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir d;
  run("mkdir -p '" + (d / "entry/data/sub") + "' && echo secret-data >'" + (d / "entry/data/sub/f") +
      "' && chmod 0444 '" + (d / "entry/data/sub/f") + "' && ln -s sub/f '" + (d / "entry/data/l") + "' && chown -R " +
      "65534:65534 '" + (d / "entry") + "'");
  run("mkdir -m 0700 '" + (d / "job") + "' && chown 4242:4242 '" + (d / "job") + "' && chmod 0755 '" + d.path() + "'");
  UniqueFd entry = open_dir(d / "entry");
  UniqueFd job = open_dir(d / "job");
  auto m = materialise(entry.get(), "data", job.get(), "ds/x", JobUser{k_attacker_uid, k_attacker_gid});
  ASSERT_TRUE(m) << m.error().message;
  EXPECT_EQ(m->files, 1U);
  EXPECT_EQ(m->linked, 1U);
  EXPECT_EQ(m->created_top, "ds");
  struct stat st {};
  ASSERT_EQ(::lstat((d / "job/ds").c_str(), &st), 0);
  EXPECT_EQ(m->created_ino, st.st_ino); // what the daemon's rollback may remove: that very directory
  ASSERT_EQ(::lstat((d / "job/ds/x/sub").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, k_attacker_uid); // directories are the user's
  ASSERT_EQ(::lstat((d / "job/ds/x/l").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(st.st_uid, k_attacker_uid);
  ASSERT_EQ(::stat((d / "job/ds/x/sub/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 2U); // the same inode as the cache's file
  const std::string f = d / "job/ds/x/sub/f";
  const std::string cached = d / "entry/data/sub/f";
  // The job reads, renames and deletes what it got, and cannot write through it or chmod it.
  EXPECT_EQ(run_as_attacker([&] {
              bool no_write = ::open(f.c_str(), O_WRONLY | O_APPEND) < 0 && errno == EACCES;
              bool no_chmod = ::chmod(f.c_str(), 0666) != 0;
              bool no_trunc = ::truncate(f.c_str(), 0) != 0;
              bool reads = read_file(f) == "secret-data\n";
              bool renames = ::rename(f.c_str(), (f + ".moved").c_str()) == 0;
              bool deletes = ::unlink((f + ".moved").c_str()) == 0;
              return no_write && no_chmod && no_trunc && reads && renames && deletes;
            }),
            0);
  EXPECT_EQ(read_file(cached), "secret-data\n");
  // An existing destination is refused and left as it was.
  write_file(d / "job/mine", "user data");
  auto again = materialise(entry.get(), "data", job.get(), "mine", JobUser{k_attacker_uid, k_attacker_gid});
  ASSERT_FALSE(again);
  EXPECT_EQ(read_file(d / "job/mine"), "user data");
}

TEST(CacheMaterialise, ASymlinkPlantedOnTheWayIsNeverFollowed)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir d;
  run("mkdir -p '" + (d / "entry/data") + "' '" + (d / "outside") + "' && echo x >'" + (d / "entry/data/f") + "'");
  run("mkdir -m 0700 '" + (d / "job") + "' && chown 4242:4242 '" + (d / "job") + "'");
  ASSERT_EQ(::symlink((d / "outside").c_str(), (d / "job/ds").c_str()), 0);
  UniqueFd entry = open_dir(d / "entry");
  UniqueFd job = open_dir(d / "job");
  auto m = materialise(entry.get(), "data", job.get(), "ds/x", JobUser{k_attacker_uid, k_attacker_gid});
  EXPECT_FALSE(m);
  EXPECT_FALSE(exists_nofollow(d / "outside/x"));
}

TEST(Child, DropsToTheUserAndPassesDescriptors)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir d;
  write_file(d / "root-only", "r");
  ::chmod((d / "root-only").c_str(), 0600);
  ipc::Credentials user{k_attacker_uid, k_attacker_gid, {k_attacker_gid, 4343}, "attacker", {}};
  const std::string path = d / "root-only";
  auto child = ipc::spawn_as(user, {}, [&](int sock, const std::vector<int>&) {
    std::string ids = std::to_string(::getuid()) + " " + std::to_string(::geteuid()) + " " +
                      std::to_string(::getgid()) + " " + std::to_string(::getgroups(0, nullptr)) + " " +
                      (::open(path.c_str(), O_RDONLY) < 0 ? "denied" : "read");
    UniqueFd mine(::open("/dev/null", O_RDONLY));
    (void)ipc::send_message(sock, ids, {mine.get()});
    return 7;
  });
  ASSERT_TRUE(child);
  auto msg = ipc::receive_message(child->sock(), std::chrono::seconds(10));
  ASSERT_TRUE(msg) << msg.error().message;
  EXPECT_EQ(msg->text, "4242 4242 4242 2 denied");
  EXPECT_EQ(msg->fds.size(), 1U);
  EXPECT_EQ(*child->wait(), 7);
  // Never as root.
  const ipc::Credentials root{0, 0, {}, "root", {}};
  EXPECT_FALSE(ipc::spawn_as(root, {}, [](int, const std::vector<int>&) { return 0; }));
  // A child killed by a signal says so.
  auto killed = ipc::spawn_as(user, {}, [](int, const std::vector<int>&) {
    ::raise(SIGKILL);
    return 0;
  });
  ASSERT_TRUE(killed);
  auto status = killed->wait();
  ASSERT_FALSE(status);
  EXPECT_NE(status.error().message.find("SIGKILL"), std::string::npos) << status.error().message;
}

TEST(Child, AMessageCarriesAtMostEightDescriptors)
{
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd a(pair[0]), b(pair[1]);
  std::vector<UniqueFd> nulls;
  std::vector<int> fds;
  for (int i = 0; i < 9; ++i) {
    nulls.emplace_back(::open("/dev/null", O_RDONLY | O_CLOEXEC));
    fds.push_back(nulls.back().get());
  }
  auto too_many = ipc::send_message(a.get(), "nine", fds);
  ASSERT_FALSE(too_many); // refused, not written past the control buffer
  EXPECT_NE(too_many.error().message.find("at most 8"), std::string::npos);
  fds.pop_back();
  ASSERT_TRUE(ipc::send_message(a.get(), "eight", fds));
  auto got = ipc::receive_message(b.get(), std::chrono::seconds(5));
  ASSERT_TRUE(got);
  EXPECT_EQ(got->text, "eight");
  EXPECT_EQ(got->fds.size(), 8U);
}

// A child that says two things at once (a socket is a stream): each is received by its own call,
// none of the second is taken with the first, and the descriptors sent with the second arrive with it.
TEST(Child, TwoMessagesSentAtOnceAreReceivedOneByOne)
{
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  UniqueFd a(pair[0]), b(pair[1]);
  UniqueFd null(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  ASSERT_TRUE(ipc::send_message(a.get(), "the read is over"));
  ASSERT_TRUE(ipc::send_message(a.get(), std::string(100000, 's'), {null.get()}));
  a.reset();
  auto first = ipc::receive_message(b.get(), std::chrono::seconds(5));
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_EQ(first->text, "the read is over");
  EXPECT_TRUE(first->fds.empty());
  auto second = ipc::receive_message(b.get(), std::chrono::seconds(5));
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_EQ(second->text, std::string(100000, 's'));
  EXPECT_EQ(second->fds.size(), 1U);
  auto none = ipc::receive_message(b.get(), std::chrono::seconds(5));
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, EPIPE);
}

// A daemon stopped (SIGSTOP) with its socket's queue of connections full: a client's connect gets
// EAGAIN, which on a Unix socket is no connection under way. Said as what it is, within the
// connect deadline (it used to poll an unconnected socket and blame an impostor of uid -1).
TEST(Client, ADaemonWhoseQueueOfConnectionsIsFullIsSaidToBeSo)
{
  TempDir d;
  const std::string path = d / "stagehandd.sock";
  UniqueFd l(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  struct sockaddr_un addr {};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(l.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(l.get(), 0), 0); // never accepted
  std::vector<UniqueFd> queued;
  for (int i = 0; i < 64; ++i) { // fills the queue: the next non-blocking connect gets EAGAIN
    UniqueFd c(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (::connect(c.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof addr) != 0) {
      ASSERT_EQ(errno, EAGAIN);
      break;
    }
    queued.push_back(std::move(c));
  }
  ipc::CallOptions options;
  options.connect_deadline = std::chrono::milliseconds(300);
  auto reply = ipc::call(path, proto::StatusQuery{}, options);
  ASSERT_FALSE(reply);
  EXPECT_EQ(reply.error().code, EAGAIN);
  EXPECT_EQ(reply.error().message, path + ": the daemon's queue of connections is full (it is stopped, or far behind)");
}

TEST(Client, ASocketNotServedByRootIsToldNothing)
{
  STAGEHAND_REQUIRE_ROOT();
  // A user plants a socket where the daemon's should be: the client (root's epilog, or a user's
  // job) refuses it after connecting, before sending a byte, and believes none of its answers.
  TempDir d;
  ::chmod(d.path().c_str(), 0777);
  const std::string path = d / "stagehandd.sock";
  ipc::Credentials user{k_attacker_uid, k_attacker_gid, {k_attacker_gid}, "attacker", {}};
  auto fake = ipc::spawn_as(user, {}, [&](int sock, const std::vector<int>&) {
    UniqueFd l(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    struct sockaddr_un addr {};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
    if (::bind(l.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof addr) != 0 || ::listen(l.get(), 4) != 0) {
      return 2;
    }
    ::chmod(path.c_str(), 0666);
    (void)ipc::send_message(sock, "listening");
    UniqueFd c(::accept4(l.get(), nullptr, nullptr, SOCK_CLOEXEC));
    // Count what the client sends before it gives up on us.
    struct pollfd p {c.get(), POLLIN, 0};
    std::size_t got = 0;
    char buf[256];
    while (::poll(&p, 1, 2000) > 0) {
      ssize_t n = ::read(c.get(), buf, sizeof buf);
      if (n <= 0) {
        break;
      }
      got += static_cast<std::size_t>(n);
    }
    (void)ipc::send_message(sock, std::to_string(got));
    return 0;
  });
  ASSERT_TRUE(fake);
  auto up = ipc::receive_message(fake->sock(), std::chrono::seconds(10));
  ASSERT_TRUE(up);
  ASSERT_EQ(up->text, "listening");
  auto reply = ipc::call(path, proto::StatusQuery{});
  ASSERT_FALSE(reply);
  EXPECT_EQ(reply.error().kind, ErrorKind::refused);
  EXPECT_NE(reply.error().message.find("is served by uid 4242, not root"), std::string::npos) << reply.error().message;
  auto received = ipc::receive_message(fake->sock(), std::chrono::seconds(10));
  ASSERT_TRUE(received);
  EXPECT_EQ(received->text, "0"); // not a byte of the request
  EXPECT_EQ(*fake->wait(), 0);
}

TEST(Child, NoDaemonDescriptorReachesTheUserWhenCloseRangeFails)
{
  STAGEHAND_REQUIRE_ROOT();
  // In a process whose seccomp filter makes close_range fail with ENOSYS (an older kernel) or
  // EPERM (a site's filter), a descriptor the parent holds must still not reach the child.
  for (int err : {ENOSYS, EPERM}) {
    pid_t tester = ::fork();
    ASSERT_GE(tester, 0);
    if (tester == 0) {
      UniqueFd opened(::open("/dev/null", O_RDONLY));
      UniqueFd secret(::fcntl(opened.get(), F_DUPFD, 50)); // above the child's own (not CLOEXEC: only spawn_as's close stops it)
      struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_close_range, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | static_cast<unsigned>(err)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      };
      struct sock_fprog prog {static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
      if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0 ||
          ::syscall(__NR_close_range, 1000, 1000, 0) == 0) {
        ::_exit(10); // the filter is not in place: the test would prove nothing
      }
      const int fd = secret.get();
      ipc::Credentials user{k_attacker_uid, k_attacker_gid, {k_attacker_gid}, "attacker", {}};
      auto child = ipc::spawn_as(user, {}, [fd](int sock, const std::vector<int>&) {
        (void)ipc::send_message(sock, ::fcntl(fd, F_GETFD) == -1 ? "closed" : "open");
        return 0;
      });
      if (!child) {
        ::_exit(11);
      }
      auto said = ipc::receive_message(child->sock(), std::chrono::seconds(20));
      if (!said || said->text != "closed") {
        std::fprintf(stderr, "child said: %s\n", said ? said->text.c_str() : said.error().message.c_str());
        auto w = child->wait();
        std::fprintf(stderr, "child ended: %s\n", w ? std::to_string(*w).c_str() : w.error().message.c_str());
      }
      ::_exit(said && said->text == "closed" ? 0 : 12);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(tester, &status, 0), tester);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "close_range failing with errno " << err
                                      << " (10: no filter, 11: no child, 12: the descriptor reached the child)";
  }
}

TEST(Child, AStoppedChildIsSeenWithoutProc)
{
  STAGEHAND_REQUIRE_ROOT();
  // The job user may SIGSTOP the daemon's child (it runs with their uid); the daemon must see it
  // even where a unit's ProtectProc= hides the child's /proc entry: from the kernel, as its parent.
  ipc::Credentials user{k_attacker_uid, k_attacker_gid, {k_attacker_gid}, "attacker", {}};
  auto child = ipc::spawn_as(user, {}, [](int sock, const std::vector<int>&) {
    (void)ipc::send_message(sock, "up");
    ::pause();
    return 0;
  });
  ASSERT_TRUE(child);
  ASSERT_TRUE(ipc::receive_message(child->sock(), std::chrono::seconds(10)));
  EXPECT_FALSE(child->stopped());
  ASSERT_EQ(::kill(child->pid(), SIGSTOP), 0);
  bool seen = false;
  for (int i = 0; i < 500 && !seen; ++i) {
    seen = child->stopped();
    if (!seen) {
      ::usleep(10000);
    }
  }
  EXPECT_TRUE(seen);
  EXPECT_TRUE(child->stopped()); // asking does not consume it
  ASSERT_EQ(::kill(child->pid(), SIGCONT), 0);
  child->kill();
  EXPECT_FALSE(child->stopped());
}

TEST(CacheMaterialise, RacingSwapsNeverMakeRootChownOrChmodAnythingElse)
{
  STAGEHAND_REQUIRE_ROOT();
  // The job user swaps, in a loop, the name root is creating for (a) a symlink to a root-only file
  // and (b) a hard link it holds to a cache file (every cache hit gives it one). Root must change
  // the owner or mode of neither (found by review: fchmodat/fchownat by path).
  TempDir d;
  run("mkdir -p '" + (d / "entry/data") + "' && echo cached >'" + (d / "entry/data/f") + "' && chmod 0444 '" +
      (d / "entry/data/f") + "' && chown -R 65534:65534 '" + (d / "entry") + "'");
  run("mkdir -m 0700 '" + (d / "job") + "' && chown 4242:4242 '" + (d / "job") + "' && chmod 0755 '" + d.path() + "'");
  write_file(d / "root-only", "secret");
  ::chmod((d / "root-only").c_str(), 0600);
  UniqueFd entry = open_dir(d / "entry");
  UniqueFd job = open_dir(d / "job");
  const JobUser user{k_attacker_uid, k_attacker_gid};
  for (int k = 0; k < 500; ++k) { // earlier cache hits: hard links the job holds to the cached file
    ASSERT_TRUE(materialise(entry.get(), "data/f", job.get(), "h" + std::to_string(k), user));
  }
  const std::string job_path = d / "job";
  const std::string target = d / "root-only";
  auto race = [&](const std::function<void()>& racer_step) {
    pid_t racer = start_attacker_loop(racer_step);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    int attempts = 0;
    for (; std::chrono::steady_clock::now() < until; ++attempts) {
      (void)fs::remove_tree(job.get(), "a");
      (void)materialise(entry.get(), "data", job.get(), "a/x", user);
    }
    stop_child(racer);
    return attempts;
  };
  int n1 = race([&] {
    static int fd = ::open(job_path.c_str(), O_RDONLY | O_DIRECTORY);
    static unsigned n = 0;
    ::symlinkat(target.c_str(), fd, "s");
    if (::renameat2(fd, "s", fd, "a", RENAME_EXCHANGE) == 0) {
      ::renameat(fd, "s", fd, ("t" + std::to_string(n++)).c_str()); // root's directory, out of the way
    }
  });
  int n2 = race([&] {
    static int fd = ::open(job_path.c_str(), O_RDONLY | O_DIRECTORY);
    static unsigned k = 0;
    if (::renameat2(fd, ("h" + std::to_string(k % 500)).c_str(), fd, "a", RENAME_EXCHANGE) == 0) {
      ::renameat(fd, ("h" + std::to_string(k % 500)).c_str(), fd, ("u" + std::to_string(k)).c_str());
      ++k;
    }
  });
  struct stat st {};
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0U);
  EXPECT_EQ(st.st_mode & 07777, 0600U) << "after " << n1 << " attempts";
  ASSERT_EQ(::stat((d / "entry/data/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534U) << "after " << n2 << " attempts";
  EXPECT_EQ(st.st_mode & 07777, 0444U);
}

// Counters a service-side child updates (a directory fill's bytes and entries): the child given
// the descriptor writes them, as another user, and the parent reads them; a child not given it
// (the job user's reader, forked from the same process) has no mapping of them at all.
TEST(Child, CountersInSharedMemoryAreSeenByTheParent)
{
  STAGEHAND_REQUIRE_ROOT();
  auto counters = ipc::SharedMemory<archive::WorkCounters>::make();
  ASSERT_TRUE(counters) << counters.error().message;
  archive::WorkCounters* c = counters->get();
  ipc::Credentials user{k_attacker_uid, k_attacker_gid, {k_attacker_gid}, "attacker", {}};
  auto child = ipc::spawn_as(user, {counters->fd()}, [](int sock, const std::vector<int>& kept) {
    auto shared = ipc::SharedMemory<archive::WorkCounters>::attach(kept.at(0));
    if (!shared) {
      return 1;
    }
    (*shared)->bytes.store(123456789012ULL);
    (*shared)->entries.store(42);
    // A hostile child cannot shrink it under the parent (whose next read would be a SIGBUS).
    const bool shrunk = ::ftruncate(kept.at(0), 0) == 0;
    (void)ipc::send_message(sock, shrunk ? "shrunk" : "set");
    return 0;
  });
  ASSERT_TRUE(child);
  auto set = ipc::receive_message(child->sock(), std::chrono::seconds(10));
  ASSERT_TRUE(set);
  EXPECT_EQ(set->text, "set");
  EXPECT_EQ(*child->wait(), 0);
  EXPECT_EQ(c->bytes.load(), 123456789012ULL); // written by another process, as another user
  EXPECT_EQ(c->entries.load(), 42U);

  auto other = ipc::spawn_as(user, {}, [c](int sock, const std::vector<int>&) {
    const bool mapped = ::msync(static_cast<void*>(c), sizeof *c, MS_ASYNC) == 0 || errno != ENOMEM;
    (void)ipc::send_message(sock, mapped ? "mapped" : "not mapped");
    return 0;
  });
  ASSERT_TRUE(other);
  auto said = ipc::receive_message(other->sock(), std::chrono::seconds(10));
  ASSERT_TRUE(said);
  EXPECT_EQ(said->text, "not mapped");
  EXPECT_EQ(*other->wait(), 0);
  EXPECT_EQ(c->bytes.load(), 123456789012ULL);
}

// The daemon under `ulimit -n 256` (issue 10, item 7): its children still start, with the
// descriptors they are given.
TEST(Child, StartsUnderALowDescriptorLimit)
{
  STAGEHAND_REQUIRE_ROOT();
  auto said = run_with_watchdog(
    [] {
      struct rlimit few {256, 256};
      ::setrlimit(RLIMIT_NOFILE, &few);
      UniqueFd given(::open("/dev/null", O_RDONLY | O_CLOEXEC));
      ipc::Credentials user{k_attacker_uid, k_attacker_gid, {k_attacker_gid}, "attacker", {}};
      auto child = ipc::spawn_as(user, {given.get()}, [](int sock, const std::vector<int>& kept) {
        return ipc::send_message(sock, std::to_string(kept.size())) ? 0 : 1;
      });
      if (!child) {
        return child.error().message;
      }
      auto msg = ipc::receive_message(child->sock(), std::chrono::seconds(10));
      auto status = child->wait();
      return msg ? msg->text + " " + (status ? std::to_string(*status) : status.error().message) : msg.error().message;
    },
    std::chrono::seconds(30));
  ASSERT_TRUE(said);
  EXPECT_EQ(*said, "1 0");
}

namespace {

// What a copied directory's fill is published as.
EntryMeta copied_dir(const std::string& key, const std::string& source)
{
  EntryMeta meta;
  meta.key = key;
  meta.source = source;
  meta.kind = stage::SourceKind::dir;
  meta.how = stage::Placement::copied;
  return meta;
}

} // namespace

TEST(CacheStore, PublishedEntriesAreRootsAndReadOnlyWhateverTheFillerLeft)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir d;
  auto store = Store::open(d / "cache");
  ASSERT_TRUE(store) << store.error().message;
  const std::string key(64, 'a');
  auto fill = store->begin_fill(key, k_attacker_uid, k_attacker_gid);
  ASSERT_TRUE(fill);
  // The filler (the service user) leaves writable files, a set-uid bit and a writable directory:
  // a process of theirs that lingers could change what jobs get from then on.
  // (Through the fill's directory fd, as the fill child gets it: the cache directory is root's 0700.)
  const int dir = fill->dir.get();
  ASSERT_EQ(run_as_attacker([&] {
              return ::mkdirat(dir, "data", 0777) == 0 && ::mkdirat(dir, "data/sub", 0777) == 0 &&
                     ::fchmodat(dir, "data/sub", 0777, 0) == 0 &&
                     ::close(::openat(dir, "data/sub/f", O_CREAT | O_WRONLY, 0666)) == 0 &&
                     ::fchmodat(dir, "data/sub/f", 04777, 0) == 0 && ::symlinkat("f", dir, "data/sub/l") == 0;
            }),
            0);
  ASSERT_TRUE(store->publish(*fill, copied_dir(key, "/src/a")));
  const std::string entry = d / ("cache/entries/" + key);
  for (const char* rel : {"", "/data", "/data/sub", "/data/sub/f", "/data/sub/l", "/manifest.json"}) {
    struct stat st {};
    ASSERT_EQ(::lstat((entry + rel).c_str(), &st), 0) << rel;
    EXPECT_EQ(st.st_uid, 0U) << rel;
    EXPECT_EQ(st.st_gid, 0U) << rel;
    if (!S_ISLNK(st.st_mode) && std::string(rel) != "/manifest.json") { // root writes its manifest
      // Root's: its own write bit gives no one else anything; no group/other write, no set-id.
      EXPECT_EQ(st.st_mode & 07022, 0U) << rel << ": mode " << std::oct << (st.st_mode & 07777);
    }
  }
  // A process of the filler's that still holds the fill's directory (as the fill child did) can
  // change nothing of it now: no file opens for writing, no name can be added.
  ASSERT_TRUE(fill->dir.valid());
  EXPECT_NE(run_as_attacker([&] { return ::openat(fill->dir.get(), "data/sub/f", O_WRONLY) >= 0; }), 0);
  EXPECT_NE(run_as_attacker([&] {
              return ::openat(fill->dir.get(), "data/sub/new", O_WRONLY | O_CREAT, 0644) >= 0 ||
                     ::renameat(fill->dir.get(), "data/sub/f", fill->dir.get(), "data/sub/g") == 0;
            }),
            0);
  // Readable still: jobs read the cache's files through their "other" bits. The owner's bits stay
  // (root's: they give no job anything); no set-id bit, no group/other write.
  struct stat st {};
  ASSERT_EQ(::stat((entry + "/data/sub/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755U);
}

// The seal's take-over runs on several threads over a tree of many directories: every name is
// root's, a symlink's target outside is not touched, a hard link counts once, and what the entry
// is said to occupy is what it occupies.
TEST(CacheStore, ASealTakesOverAWideTreeAndMeasuresItInTheSamePass)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir d;
  write_file(d / "outside", "the filler's own file elsewhere");
  ASSERT_EQ(::chown((d / "outside").c_str(), k_attacker_uid, k_attacker_gid), 0);
  auto store = Store::open(d / "cache");
  ASSERT_TRUE(store) << store.error().message;
  const std::string key(64, 'e');
  auto fill = store->begin_fill(key, k_attacker_uid, k_attacker_gid);
  ASSERT_TRUE(fill);
  const int dir = fill->dir.get();
  const std::string outside = d / "outside";
  ASSERT_EQ(run_as_attacker([&] {
              bool ok = ::mkdirat(dir, "data", 0755) == 0;
              for (int i = 0; ok && i < 24; ++i) {
                const std::string sub = "data/d" + std::to_string(i);
                ok = ::mkdirat(dir, sub.c_str(), 0775) == 0;
                for (int j = 0; ok && j < 40; ++j) {
                  const int f = ::openat(dir, (sub + "/f" + std::to_string(j)).c_str(), O_CREAT | O_WRONLY, 0664);
                  ok = f >= 0 && ::write(f, std::string(3000, 'x').data(), 3000) == 3000 && ::close(f) == 0;
                }
              }
              return ok && ::mkdirat(dir, "data/d3/deep", 0777) == 0 && ::mkdirat(dir, "data/d3/deep/er", 0777) == 0 &&
                     ::close(::openat(dir, "data/d3/deep/er/g", O_CREAT | O_WRONLY, 06777)) == 0 &&
                     ::linkat(dir, "data/d4/f0", dir, "data/d5/hard", 0) == 0 &&
                     ::symlinkat(outside.c_str(), dir, "data/d7/out") == 0;
            }),
            0);
  auto pub = store->publish(*fill, copied_dir(key, "/src/wide"));
  ASSERT_TRUE(pub) << pub.error().message;
  const std::string entry = d / ("cache/entries/" + key);
  int names = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(entry)) {
    struct stat st {};
    ASSERT_EQ(::lstat(e.path().c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 0U) << e.path();
    if (!S_ISLNK(st.st_mode)) {
      EXPECT_EQ(st.st_mode & 07022, 0U) << e.path() << ": mode " << std::oct << (st.st_mode & 07777);
    }
    ++names;
  }
  EXPECT_EQ(names, 1 + 24 + 24 * 40 + 3 + 1 + 1 + 1); // data, dirs, files, deep/er/g, hard, out, manifest
  struct stat st {};
  ASSERT_EQ(::stat(outside.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, k_attacker_uid) << "the symlink was followed";
  UniqueFd entries = open_dir(d / "cache/entries");
  EXPECT_EQ(pub->disk_bytes, disk_usage(entries.get(), key)); // the old two-pass measure
}

// A compromised filler links into its fill a file that someone else holds open for writing (their
// own, world-writable, on the cache's filesystem), or gives a file of its own a name outside: the
// seal would make it root's, but an open descriptor outlives a change of owner, and the entry could
// be changed after it is published. Refused; the outside file is left as it was.
TEST(CacheStore, ASealRefusesWhatWasLinkedInFromOutsideOrHasANameOutside)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir d;
  constexpr uid_t k_other = k_attacker_uid + 1; // the outside file's owner (their job, say)
  auto store = Store::open(d / "cache");
  ASSERT_TRUE(store) << store.error().message;
  const std::string shared = d / "shared"; // as /dev/shm: everyone's, sticky
  ASSERT_EQ(::mkdir(shared.c_str(), 0777), 0);
  ASSERT_EQ(::chmod(shared.c_str(), 01777), 0);
  const std::string outside = shared + "/outside";
  for (const char* how : {"linked in, outside name kept", "linked in, outside name removed", "named outside"}) {
    SCOPED_TRACE(how);
    const std::string h = how;
    write_file(outside, "theirs");
    ASSERT_EQ(::chown(outside.c_str(), k_other, k_other), 0);
    ASSERT_EQ(::chmod(outside.c_str(), 0666), 0);
    UniqueFd held(::open(outside.c_str(), O_WRONLY | O_CLOEXEC)); // their writer, open before the seal
    ASSERT_TRUE(held.valid());
    const std::string key(64, h == "named outside" ? 'c' : (h.find("kept") != std::string::npos ? 'a' : 'b'));
    auto fill = store->begin_fill(key, k_attacker_uid, k_attacker_gid);
    ASSERT_TRUE(fill);
    const int dir = fill->dir.get();
    const std::string mine = shared + "/mine";
    ASSERT_EQ(run_as_attacker([&] {
                if (::mkdirat(dir, "data", 0755) != 0) {
                  return false;
                }
                if (h == "named outside") { // its own file, with a second name where others look
                  return ::close(::openat(dir, "data/f", O_CREAT | O_WRONLY, 0644)) == 0 &&
                         ::linkat(dir, "data/f", AT_FDCWD, mine.c_str(), 0) == 0;
                }
                return ::linkat(AT_FDCWD, outside.c_str(), dir, "data/f", 0) == 0;
              }),
              0);
    if (h.find("removed") != std::string::npos) {
      ASSERT_EQ(::unlink(outside.c_str()), 0);
    }
    auto pub = store->publish(*fill, copied_dir(key, "/src/" + h));
    ASSERT_FALSE(pub) << "published";
    EXPECT_EQ(pub.error().code, EPERM) << pub.error().message;
    EXPECT_NE(pub.error().message.find(h == "named outside" ? "a name outside the fill" : "not by the fill's user"),
              std::string::npos)
      << pub.error().message;
    struct stat st {};
    ASSERT_EQ(::fstat(held.get(), &st), 0);
    if (h != "named outside") {
      EXPECT_EQ(st.st_uid, k_other) << "root took over a file that is not the filler's";
      EXPECT_EQ(st.st_mode & 07777, 0666U);
    } else { // nor is the filler's file outside made root's (a root-owned file where it chose)
      ASSERT_EQ(::stat(mine.c_str(), &st), 0);
      EXPECT_EQ(st.st_uid, k_attacker_uid) << "root took over a name outside the fill";
    }
    EXPECT_FALSE(store->lookup(key));
    store->discard(*fill);
    ::unlink(outside.c_str());
    ::unlink(mine.c_str());
  }
}

// A filesystem mounted inside a fill (only root could: a filler's own mount namespace is not the
// daemon's) is refused, and the root of what is mounted there is not made root's.
TEST(CacheStore, ASealRefusesAFilesystemMountedInTheFillAndLeavesItsOwner)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir d;
  auto store = Store::open(d / "cache");
  ASSERT_TRUE(store) << store.error().message;
  const std::string key(64, 'd');
  auto fill = store->begin_fill(key, k_attacker_uid, k_attacker_gid);
  ASSERT_TRUE(fill);
  const std::string mounted = d / ("cache/tmp/" + fill->name + "/data/m");
  ASSERT_EQ(::mkdirat(fill->dir.get(), "data", 0755), 0);
  ASSERT_EQ(::mkdirat(fill->dir.get(), "data/m", 0755), 0);
  ASSERT_EQ(::fchownat(fill->dir.get(), "data", k_attacker_uid, k_attacker_gid, 0), 0); // as the filler made them
  ASSERT_EQ(::fchownat(fill->dir.get(), "data/m", k_attacker_uid, k_attacker_gid, 0), 0);
  const std::string opts = "mode=0755,uid=" + std::to_string(k_attacker_uid);
  ASSERT_EQ(::mount("tmpfs", mounted.c_str(), "tmpfs", 0, opts.c_str()), 0) << std::strerror(errno);
  auto pub = store->publish(*fill, copied_dir(key, "/src/m"));
  struct stat st {};
  const int stat_rc = ::stat(mounted.c_str(), &st);
  ::umount2(mounted.c_str(), MNT_DETACH);
  ASSERT_FALSE(pub) << "published with a mount inside";
  EXPECT_EQ(pub.error().code, EXDEV) << pub.error().message;
  ASSERT_EQ(stat_rc, 0);
  EXPECT_EQ(st.st_uid, k_attacker_uid) << "the mounted filesystem's root was taken over";
}

// The filler races the seal: in a loop it swaps a file for a symlink to its own file outside the
// fill, and a directory for a symlink to its own directory outside, through the fill's directory
// fd (as a lingering fill child would hold it). Root must change the owner or mode of nothing
// outside, however the seal ends (published, or refused because a name was replaced meanwhile).
TEST(CacheStore, AFillerSwappingNamesDuringTheSealNeverMakesRootChangeAnythingOutside)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir d;
  const std::string out_file = d / "out-file";
  const std::string out_dir = d / "out-dir";
  write_file(out_file, "the filler's own");
  ASSERT_EQ(::mkdir(out_dir.c_str(), 0775), 0);
  write_file(out_dir + "/g", "the filler's own too");
  for (const std::string& p : {out_file, out_dir, out_dir + "/g"}) {
    ASSERT_EQ(::chown(p.c_str(), k_attacker_uid, k_attacker_gid), 0);
    ASSERT_EQ(::chmod(p.c_str(), 0775), 0);
  }
  auto store = Store::open(d / "cache");
  ASSERT_TRUE(store) << store.error().message;
  int published = 0;
  int refused = 0;
  // Three seconds of races, and never fewer than a dozen however slow a loaded machine runs them.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  for (int k = 0; k < 12 || std::chrono::steady_clock::now() < until; ++k) {
    char key_text[65];
    std::snprintf(key_text, sizeof key_text, "%064x", k); // a new entry each time
    const std::string key = key_text;
    auto fill = store->begin_fill(key, k_attacker_uid, k_attacker_gid);
    ASSERT_TRUE(fill) << fill.error().message;
    const int dir = fill->dir.get();
    ASSERT_EQ(run_as_attacker([&] {
                bool ok = ::mkdirat(dir, "data", 0775) == 0;
                for (int i = 0; ok && i < 8; ++i) {
                  const std::string sub = "data/s" + std::to_string(i);
                  ok = ::mkdirat(dir, sub.c_str(), 0775) == 0 && ::mkdirat(dir, (sub + "/d").c_str(), 0775) == 0 &&
                       ::close(::openat(dir, (sub + "/f").c_str(), O_CREAT | O_WRONLY, 0664)) == 0 &&
                       ::symlinkat(out_file.c_str(), dir, (sub + "/l").c_str()) == 0 &&
                       ::symlinkat(out_dir.c_str(), dir, (sub + "/ld").c_str()) == 0;
                }
                return ok;
              }),
              0);
    pid_t racer = start_attacker_loop([dir] {
      static unsigned n = 0;
      const std::string sub = "data/s" + std::to_string(n++ % 8);
      ::renameat2(dir, (sub + "/f").c_str(), dir, (sub + "/l").c_str(), RENAME_EXCHANGE);
      ::renameat2(dir, (sub + "/d").c_str(), dir, (sub + "/ld").c_str(), RENAME_EXCHANGE);
    });
    auto pub = store->publish(*fill, copied_dir(key, "/src/race"));
    stop_child(racer);
    ++(pub ? published : refused);
    if (!pub) {
      store->discard(*fill);
    }
  }
  for (const std::string& p : {out_file, out_dir, out_dir + "/g"}) {
    struct stat st {};
    ASSERT_EQ(::lstat(p.c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, k_attacker_uid) << p << " after " << published << " seals and " << refused << " refusals";
    EXPECT_EQ(st.st_mode & 07777, 0775U) << p;
  }
  std::printf("%d seals, %d refused\n", published, refused);
}

TEST(CacheStore, TheIndexAnswersWithoutTheManifestsAndGcBringsItInLineWithTheDisk)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir d;
  auto store = Store::open(d / "cache");
  ASSERT_TRUE(store) << store.error().message;
  auto publish = [&](Store& s, char c) {
    const std::string key(64, c);
    auto fill = s.begin_fill(key, 0, 0);
    ASSERT_TRUE(fill);
    write_file(d / ("cache/tmp/" + fill->name + "/data"), std::string(100, c));
    EntryMeta meta;
    meta.key = key;
    meta.source = std::string("/src/") + c;
    meta.kind = stage::SourceKind::file;
    meta.how = stage::Placement::copied;
    ASSERT_TRUE(s.publish(*fill, meta));
  };
  publish(*store, 'a');
  publish(*store, 'b');
  EXPECT_EQ(store->totals().entries, 2U);
  EXPECT_GT(store->totals().bytes, 200U);
  // A restart reads the manifests once.
  auto reopened = Store::open(d / "cache");
  ASSERT_TRUE(reopened);
  EXPECT_EQ(reopened->list().size(), 2U);
  EXPECT_EQ(reopened->totals().bytes, store->totals().bytes);
  // Listing and totals come from memory: a manifest changed behind the daemon's back is not read.
  write_file(d / ("cache/entries/" + std::string(64, 'a') + "/manifest.json"), "{garbage");
  EXPECT_EQ(store->list().size(), 2U);
  // GC's scan (no lock) and reconciliation: an entry removed behind its back leaves the index, one
  // published by another Store joins it, a broken one is set aside.
  fs::remove_tree(open_dir(d / "cache/entries").get(), std::string(64, 'b'));
  publish(*reopened, 'c');
  const auto scan = store->scan();
  auto debris = store->set_aside_debris({}, scan);
  ASSERT_EQ(debris.size(), 0U) << "'a' is known: its manifest is not read again";
  std::set<std::string> keys;
  for (const auto& e : store->list()) {
    keys.insert(e.key.substr(0, 1));
  }
  EXPECT_EQ(keys, (std::set<std::string>{"a", "c"}));
  // An entry published after the scan is not taken for gone.
  publish(*store, 'e');
  EXPECT_EQ(store->set_aside_debris({}, scan).size(), 0U);
  EXPECT_TRUE(store->list().size() == 3U);
  // A lookup that finds the entry broken drops it from the index too.
  EXPECT_FALSE(store->lookup(std::string(64, 'a')));
  EXPECT_EQ(store->list().size(), 2U);
  EXPECT_EQ(store->set_aside_debris({}, store->scan()).size(), 1U) << "and GC sets it aside";
}
