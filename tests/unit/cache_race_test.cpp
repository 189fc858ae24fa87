// The node cache against a source that changes under it (issue 24, items 4, 5 and 7): a rename
// between the walk's stat and the user's open never keys one inode while checking another, a
// source modified just before or during its fill is not published, and a fill child's end takes
// whatever it forked with it.
#include "stagehand/cache/fill.hpp"
#include "stagehand/cache/key.hpp"
#include "stagehand/cache/source.hpp"
#include "stagehand/cache/tree_read.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/ipc/child.hpp"

#include "test_support.hpp"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <thread>

#include <gtest/gtest.h>

using namespace stagehand;
using namespace stagehand::cache;
using namespace stagehand::test;

namespace {

void run(const std::string& cmd) { ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd; }

struct timespec realtime_now()
{
  struct timespec t {};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return t;
}

struct timespec plus_seconds(struct timespec t, int s)
{
  t.tv_sec += s;
  return t;
}

bool become_attacker()
{
  const gid_t g = k_attacker_gid;
  return ::setgroups(1, &g) == 0 && ::setresgid(g, g, g) == 0 && ::setresuid(k_attacker_uid, k_attacker_uid, k_attacker_uid) == 0;
}

// proj/f is another user's 0600 file in a project directory the attacker can rename entries in;
// elsewhere/decoy is the attacker's own readable file on the same filesystem.
struct SharedProject
{
  TempDir d;
  std::string proj = d / "proj";
  SharedProject()
  {
    run("mkdir -m 0755 '" + proj + "' '" + (d / "elsewhere") + "' && printf 'victim secret' >'" + proj +
        "/f' && chmod 0600 '" + proj + "/f' && printf 'decoy bytes' >'" + (d / "elsewhere/decoy") +
        "' && chmod 0644 '" + (d / "elsewhere/decoy") + "' && chown " + std::to_string(k_attacker_uid) + ":" +
        std::to_string(k_attacker_gid) + " '" + proj + "' '" + (d / "elsewhere") + "' '" + (d / "elsewhere/decoy") + "'");
  }
  // The key the owner's own staging gave: what a cache entry holding the victim's bytes is under.
  std::string owner_key()
  {
    UniqueFd fd(::open(proj.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    auto id = identify_tree(fd.get(), proj, "proj");
    EXPECT_TRUE(id) << (id ? "" : id.error().message);
    return id ? id->key : "";
  }
};

} // namespace

// Item 4: between the walk's lstat of proj/f (the victim's file) and the check of it, the attacker
// exchanges it with their decoy. Checked by name, the decoy passes and the key is the victim's: a
// hit would link the victim's cached bytes into the attacker's job. The attacker's own open is the
// check and the key comes from it: the exchange is seen and refused.
TEST(CacheRace, ARenameBetweenTheWalkAndTheOpenNeverKeysTheVictimsFile)
{
  STAGEHAND_REQUIRE_ROOT();
  SharedProject p;
  const std::string victim_key = p.owner_key();
  ASSERT_FALSE(victim_key.empty());
  const std::string decoy = p.d / "elsewhere/decoy";
  auto said = run_with_watchdog(
    [&]() -> std::string {
      if (!become_attacker()) {
        return "cannot drop to the attacker";
      }
      bool swapped = false;
      walked_entry_hook() = [&](const fs::WalkEntry& e) {
        if (e.rel == "f" && !swapped) {
          swapped = ::renameat2(AT_FDCWD, (p.proj + "/f").c_str(), AT_FDCWD, decoy.c_str(), RENAME_EXCHANGE) == 0;
        }
      };
      UniqueFd fd(::open(p.proj.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      auto id = identify_tree(fd.get(), p.proj, "proj");
      walked_entry_hook() = {};
      if (!swapped) {
        return "the race was not run";
      }
      if (id && id->key == victim_key) {
        return "the victim's key";
      }
      return id ? "another key" : "refused: " + id.error().message;
    },
    std::chrono::seconds(60));
  ASSERT_TRUE(said);
  EXPECT_EQ(*said, "refused: proj/f: changed while staging");
}

// The user side's stream of a tree for the fill: the same rule, so what is streamed is what is keyed.
TEST(CacheRace, AStreamRefusesAnEntrySwappedAfterTheWalk)
{
  STAGEHAND_REQUIRE_ROOT();
  SharedProject p;
  run("chmod 0644 '" + p.proj + "/f'"); // both readable: only the swap itself is seen
  const std::string decoy = p.d / "elsewhere/decoy";
  auto said = run_with_watchdog(
    [&]() -> std::string {
      if (!become_attacker()) {
        return "cannot drop to the attacker";
      }
      walked_entry_hook() = [&](const fs::WalkEntry& e) {
        if (e.rel == "f") {
          ::renameat2(AT_FDCWD, (p.proj + "/f").c_str(), AT_FDCWD, decoy.c_str(), RENAME_EXCHANGE);
        }
      };
      UniqueFd fd(::open(p.proj.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      UniqueFd sink(::open("/dev/null", O_WRONLY | O_CLOEXEC));
      auto s = stream_tree(fd.get(), sink.get(), p.proj, "proj");
      walked_entry_hook() = {};
      return s ? std::string("streamed") : "refused: " + s.error().message;
    },
    std::chrono::seconds(60));
  ASSERT_TRUE(said);
  EXPECT_EQ(*said, "refused: proj/f: changed while staging");
}

// Unchanged, the open-based key is the walk's: an owner's staging and a reader's agree, and a tree
// streamed for the fill has the key it was identified with.
TEST(CacheRace, AnUnchangedTreeKeysTheSameWhenIdentifiedAndStreamed)
{
  TempDir d;
  run("mkdir -p '" + (d / "t/sub") + "' && echo a >'" + (d / "t/sub/x") + "' && ln -s sub/x '" + (d / "t/l") + "'");
  UniqueFd fd(::open((d / "t").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  auto id = identify_tree(fd.get(), d / "t", "t");
  ASSERT_TRUE(id) << id.error().message;
  UniqueFd sink(::open("/dev/null", O_WRONLY | O_CLOEXEC));
  auto s = stream_tree(fd.get(), sink.get(), d / "t", "t");
  ASSERT_TRUE(s) << s.error().message;
  EXPECT_EQ(s->identity.key, id->key);
  EXPECT_FALSE(s->changed);
  EXPECT_EQ(s->identity.newest_ns, id->newest_ns);
}

// Item 5: a file rewritten within one timestamp tick keeps its key, so a fill may only be published
// when the source's entries are older than the racy window before the fill started; then any later
// write moves a ctime, and the stat after the read sees it.
TEST(CacheRace, ASourceModifiedWithinTheWindowIsNotPublishedOneOlderIs)
{
  TempDir d;
  write_file(d / "a.bin", "0123456789");
  const struct timespec written = realtime_now();
  UniqueFd fd(::open((d / "a.bin").c_str(), O_RDONLY | O_CLOEXEC));
  auto id = identify_file(fd.get(), d / "a.bin", stage::Unpack::if_archive);
  ASSERT_TRUE(id);
  // A fill starting now: the file was written just before it.
  EXPECT_EQ(publish_refusal(PublishCheck{true, id->newest_ns, realtime_now(), 10, 100}),
            "source modified during or just before staging");
  // Written during the fill (it started before the write).
  EXPECT_EQ(publish_refusal(PublishCheck{true, id->newest_ns, plus_seconds(written, -10), 10, 100}),
            "source modified during or just before staging");
  // Written longer than the window before the fill started: published.
  EXPECT_EQ(publish_refusal(PublishCheck{true, id->newest_ns, plus_seconds(written, 3), 10, 100}), "");
  // The read did not see the stat the key was made from.
  EXPECT_EQ(publish_refusal(PublishCheck{false, id->newest_ns, plus_seconds(written, 3), 10, 100}),
            "source modified during or just before staging");
  EXPECT_EQ(publish_refusal(PublishCheck{true, id->newest_ns, plus_seconds(written, 3), 101, 100}),
            "larger than the node cache");

  // A tree: one deep file's ctime is enough, whatever its mtime says (touch -d puts it far back).
  run("mkdir -p '" + (d / "t/sub") + "' && echo a >'" + (d / "t/sub/x") + "' && touch -d @5 '" + (d / "t/sub/x") +
      "' '" + (d / "t/sub") + "' '" + (d / "t") + "'");
  UniqueFd dir(::open((d / "t").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  auto tree = identify_tree(dir.get(), d / "t", "t");
  ASSERT_TRUE(tree);
  EXPECT_TRUE(changed_near(*tree, realtime_now()));
  EXPECT_FALSE(changed_near(*tree, plus_seconds(realtime_now(), 3)));
}

// Item 7: a fill child (service side or user side) may fork; its end takes the whole process group,
// so nothing of its uid lingers to alter what is published.
TEST(CacheRace, EndingAFillChildEndsWhatItForked)
{
  STAGEHAND_REQUIRE_ROOT();
  auto said = run_with_watchdog(
    [&]() -> std::string {
      ::prctl(PR_SET_CHILD_SUBREAPER, 1); // orphans come to this process: their end can be seen
      ipc::Credentials user{k_attacker_uid, k_attacker_gid, {k_attacker_gid}, "attacker", {}};
      auto child = ipc::spawn_as(user, {}, [](int sock, const std::vector<int>&) {
        pid_t lingering = ::fork();
        if (lingering == 0) {
          for (;;) {
            ::pause();
          }
        }
        (void)ipc::send_message(sock, std::to_string(lingering));
        return 0; // exits: what it forked lives on
      });
      if (!child) {
        return "spawn: " + child.error().message;
      }
      auto msg = ipc::receive_message(child->sock(), std::chrono::seconds(10));
      if (!msg) {
        return "no message";
      }
      const pid_t lingering = static_cast<pid_t>(std::stol(msg->text));
      child->kill();
      // Reparented to this process once the child is gone; killed or not, it is seen here.
      for (int i = 0; i < 500; ++i) {
        int status = 0;
        if (::waitpid(lingering, &status, WNOHANG) == lingering) {
          return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL ? "ended" : "exited by itself";
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      ::kill(lingering, SIGKILL);
      return "still running";
    },
    std::chrono::seconds(60));
  ASSERT_TRUE(said);
  EXPECT_EQ(*said, "ended");
}
