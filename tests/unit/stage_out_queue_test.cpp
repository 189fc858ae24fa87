// The daemon's stage-out queue (service::StageOutQueue) with real copies as the job user: a copy
// handed over is on disk before the epilog hears back, and a queue that died (kill -9) leaves it to
// the next one, which finishes it; a copy that keeps failing stays listed while it is retried, then
// leaves the list with its results kept on the node and why; a finished copy leaves the list and
// its directory is removed. The daemon and an epilog that stopped waiting each claim the directory
// (a rename) before they copy: one copy, never two.
#include "stagehand/service/stage_out_queue.hpp"

#include "stagehand/job/hooks.hpp"
#include "stagehand/job/stage_out.hpp"

#include "stagehand/proto/frame.hpp"

#include "stagehand/stageout/copy.hpp"
#include "stagehand/stageout/kept.hpp"
#include "stagehand/stageout/pending.hpp"
#include "stagehand/stageout/spec.hpp"
#include "stagehand/tmpdir/job_dir.hpp"
#include "stagehand/tmpdir/lifecycle.hpp"

#include "node_fixture.hpp"
#include "test_support.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <gtest/gtest.h>

using namespace stagehand;
using namespace stagehand::test;
using service::StageOutQueue;

namespace {

// Job 555 started on node n1, its directory holding `result` (42, the job user's), marked as the
// job's first node (which copies the entries without %n).
void a_job_with_a_result(const Node& n)
{
  EXPECT_TRUE(tmpdir::on_job_start(n.config, Node::job()));
  write_file(n.job_dir() + "/result", "42");
  EXPECT_EQ(::chown((n.job_dir() + "/result").c_str(), k_attacker_uid, k_attacker_gid), 0);
  UniqueFd job_fd(::open(n.job_dir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  EXPECT_EQ(run_as_attacker([&] { return static_cast<bool>(stageout::mark_first_node(job_fd.get())); }), 0);
}

// A job on node n1 whose epilog renamed its directory aside for the daemon's copy of `result`
// (42) to DEST, a directory root's until the test gives it to the job user.
struct HandedOver
{
  Node n;
  std::string dest = n.dir / "dest";
  UniqueFd state;
  proto::EndJob end;

  HandedOver()
  {
    const std::string state_path = n.dir / "state";
    EXPECT_EQ(::mkdir(dest.c_str(), 0755), 0);
    EXPECT_EQ(::mkdir(state_path.c_str(), 0700), 0);
    state = UniqueFd(::open(state_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    a_job_with_a_result(n);
    auto aside = tmpdir::on_job_end(n.config, Node::job(), tmpdir::Request::create, tmpdir::EndMove::to_stage_out);
    EXPECT_TRUE(aside && aside->pending);
    auto specs = stageout::parse_option("result:" + dest + "/result");
    EXPECT_TRUE(specs);
    end.job_id = k_job.job_id;
    end.pending = aside && aside->pending ? *aside->pending : std::string();
    end.stage_out = specs ? stageout::canonical_option(*specs, n.dir.path()) : std::string();
    end.stage_out_dir = n.dir.path();
  }
  std::shared_ptr<StageOutQueue> queue(std::chrono::milliseconds retry_pause) const
  {
    return std::make_shared<StageOutQueue>(n.config, "n1", state.get(), retry_pause);
  }
  std::vector<stageout::PendingCopy> on_disk() const
  {
    auto listed = stageout::load_pending(state.get());
    EXPECT_TRUE(listed) << listed.error().message;
    return listed ? *listed : std::vector<stageout::PendingCopy>{};
  }
};

} // namespace

TEST(StageOutQueue, AHandedOverCopyIsPersistedAndTheNextQueueFinishesIt)
{
  STAGEHAND_REQUIRE_ROOT();
  HandedOver h;
  // The first daemon takes the hand-over and dies at once, as by kill -9 (DEST cannot take the
  // copy yet: whatever its worker did, nothing is delivered).
  auto said = run_with_watchdog(
    [&] {
      auto taken = h.queue(std::chrono::hours(1))->take(h.end, k_job);
      return taken ? std::string("taken") : taken.error().message;
    },
    std::chrono::seconds(30));
  ASSERT_EQ(said, "taken");
  auto listed = h.on_disk();
  ASSERT_EQ(listed.size(), 1U);
  // Claimed: renamed to a name of the daemon's own, which the list holds.
  EXPECT_NE(listed[0].dir, h.end.pending);
  EXPECT_EQ(tmpdir::job_of_stage_out(listed[0].dir), k_job.job_id) << listed[0].dir;
  EXPECT_FALSE(exists_nofollow(h.n.base + "/" + h.end.pending));
  EXPECT_EQ(read_file(h.n.base + "/" + listed[0].dir + "/result"), "42");
  EXPECT_EQ(listed[0].job_id, k_job.job_id);
  EXPECT_EQ(listed[0].uid, k_attacker_uid) << "the job user's, though the directory is root's by then";
  EXPECT_EQ(listed[0].specs, h.end.stage_out);
  EXPECT_FALSE(exists_nofollow(h.dest + "/result"));

  // The next daemon's queue resumes it, DEST now the job user's.
  ASSERT_EQ(::chown(h.dest.c_str(), k_attacker_uid, k_attacker_gid), 0);
  auto q = h.queue(std::chrono::milliseconds(10));
  q->resume();
  EXPECT_TRUE(wait_until([&] { return q->pending().empty(); }, std::chrono::seconds(60)));
  EXPECT_EQ(read_file(h.dest + "/result"), "42");
  EXPECT_TRUE(h.on_disk().empty()) << "a finished copy leaves the persisted list";
  EXPECT_FALSE(exists_nofollow(h.n.base + "/" + listed[0].dir));
  EXPECT_TRUE(wait_until([&] { return h.n.trash().empty(); }, std::chrono::seconds(60))) << "removed, not left as trash";
  EXPECT_TRUE(stageout::load_kept(h.n.base_fd().get()).empty());
}

TEST(StageOutQueue, AFailingCopyStaysListedWhileRetriedThenItsResultsAreKeptWithWhy)
{
  STAGEHAND_REQUIRE_ROOT();
  HandedOver h; // DEST stays root's: every attempt fails
  auto q = h.queue(std::chrono::milliseconds(300));
  ASSERT_TRUE(q->take(h.end, k_job));
  const auto listed = h.on_disk();
  ASSERT_EQ(listed.size(), 1U) << "persisted before the epilog hears back";
  const std::string claimed = listed[0].dir;
  EXPECT_TRUE(wait_until(
    [&] {
      auto p = q->pending();
      return p.size() == 1 && p[0].dir == claimed && p[0].attempts >= 2;
    },
    std::chrono::seconds(60)))
    << "a failed attempt is retried and the copy stays pending";

  EXPECT_TRUE(wait_until([&] { return q->pending().empty(); }, std::chrono::seconds(60)));
  EXPECT_TRUE(h.on_disk().empty());
  auto kept = stageout::load_kept(h.n.base_fd().get());
  ASSERT_EQ(kept.size(), 1U) << "after the last attempt the results are kept under a record";
  EXPECT_EQ(kept[0].dir, claimed);
  EXPECT_EQ(kept[0].uid, k_attacker_uid);
  EXPECT_NE(kept[0].reason.find(h.dest), std::string::npos) << kept[0].reason;
  EXPECT_TRUE(exists_nofollow(h.n.base + "/" + claimed + "/result")) << "never deleted because a copy failed";
  EXPECT_FALSE(exists_nofollow(h.dest + "/result"));
}

TEST(StageOutQueue, AReloadsConfigurationIsWhatTheCopiesUseFromThenOn)
{
  STAGEHAND_REQUIRE_ROOT();
  HandedOver h; // DEST stays root's: every attempt fails, and the results are kept for keep_for
  ASSERT_EQ(h.n.config.tmpdir.keep_for, std::chrono::seconds(1));
  auto q = h.queue(std::chrono::milliseconds(300));
  ASSERT_TRUE(q->take(h.end, k_job));
  Config reloaded = h.n.config;
  reloaded.tmpdir.keep_for = std::chrono::hours(3); // the daemon's SIGHUP, while the copy is retried
  reloaded.tmpdir.base = "/nonexistent/%n";           // as for the daemon: until the next restart
  q->set_config(reloaded);
  EXPECT_EQ(q->config().tmpdir.base, h.n.config.tmpdir.base);
  const auto now = static_cast<std::int64_t>(std::time(nullptr));
  EXPECT_TRUE(wait_until([&] { return q->pending().empty(); }, std::chrono::seconds(60)));
  auto kept = stageout::load_kept(h.n.base_fd().get());
  ASSERT_EQ(kept.size(), 1U);
  EXPECT_GE(kept[0].until, now + 3 * 3600 - 5) << "kept for the reloaded keep_for, not the start's 1 s";
}

// The epilog waits 1 s for the hand-over: a daemon that reads it after the epilog gave up (a slow
// disk, a daemon stopped and woken) does not keep it (off the list, on disk too, no worker
// started, the directory not claimed), so that only the epilog copies. While it waits, the queue
// answers it "done" itself, right after the save and the claim, and copies.
TEST(StageOutQueue, AHandOverTheEpilogStoppedWaitingForIsNotKept)
{
  STAGEHAND_REQUIRE_ROOT();
  HandedOver h;
  ASSERT_EQ(::chown(h.dest.c_str(), k_attacker_uid, k_attacker_gid), 0); // a worker would copy now
  auto q = h.queue(std::chrono::milliseconds(10));
  int gave_up[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, gave_up), 0);
  UniqueFd daemon_end(gave_up[0]);
  ::close(gave_up[1]); // the epilog's end: it stopped waiting
  service::Responder to_gone(daemon_end.get());
  auto taken = q->take(h.end, k_job, &to_gone);
  ASSERT_FALSE(taken);
  EXPECT_NE(taken.error().message.find("the epilog stopped waiting"), std::string::npos) << taken.error().message;
  EXPECT_TRUE(q->pending().empty());
  EXPECT_TRUE(h.on_disk().empty());
  EXPECT_TRUE(exists_nofollow(h.n.base + "/" + h.end.pending)) << "the epilog's to copy and remove";

  int waits[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, waits), 0);
  UniqueFd daemon_side(waits[0]);
  UniqueFd epilog_side(waits[1]);
  service::Responder to_epilog(daemon_side.get());
  ASSERT_TRUE(q->take(h.end, k_job, &to_epilog));
  char buf[4096];
  const ssize_t n = ::recv(epilog_side.get(), buf, sizeof buf, MSG_DONTWAIT); // answered before take returned
  ASSERT_GT(n, 0);
  proto::FrameReader reader(proto::k_max_response_bytes);
  ASSERT_TRUE(reader.feed(buf, static_cast<std::size_t>(n)));
  auto payload = reader.next();
  ASSERT_TRUE(payload);
  auto reply = proto::parse_reply_frame(*payload);
  ASSERT_TRUE(reply);
  EXPECT_FALSE(reply->error);
  EXPECT_FALSE(reply->progress);
  EXPECT_TRUE(wait_until([&] { return q->pending().empty(); }, std::chrono::seconds(60)));
  EXPECT_EQ(read_file(h.dest + "/result"), "42");
}

// A hand-over whose directory is not under the daemon's base while its epilog still waits (a reload
// changed the base since the job started) is refused for that reason, not as an epilog that gave
// up: the epilog's line must say why it copies itself.
TEST(StageOutQueue, AHandOverNotUnderTheDaemonsBaseSaysSoWhileTheEpilogWaits)
{
  STAGEHAND_REQUIRE_ROOT();
  HandedOver h;
  auto q = h.queue(std::chrono::milliseconds(10));
  proto::EndJob elsewhere = h.end;
  elsewhere.pending = tmpdir::fresh_stage_out_name(k_job.job_id); // no such directory here
  int waits[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, waits), 0);
  UniqueFd daemon_side(waits[0]);
  UniqueFd epilog_side(waits[1]);
  service::Responder to_epilog(daemon_side.get());
  auto taken = q->take(elsewhere, k_job, &to_epilog);
  ASSERT_FALSE(taken);
  EXPECT_NE(taken.error().message.find("in the daemon's [tmpdir] base"), std::string::npos) << taken.error().message;
  EXPECT_EQ(taken.error().message.find("stopped waiting"), std::string::npos) << taken.error().message;
  EXPECT_TRUE(q->pending().empty());
}

// A daemon stuck past the epilog's wait, then woken, may answer after the epilog gave up. Both claim
// the directory (rename it to a name of their own) before they copy: whichever comes second finds
// nothing, so one copy is made, never two (two would race to the destination, and the second would
// report a failure, or keep "results" whose directory the first had removed).
TEST(StageOutQueue, AHandOverAndTheEpilogsOwnCopyClaimTheDirectoryOnlyOnce)
{
  STAGEHAND_REQUIRE_ROOT();
  HandedOver h;
  ASSERT_EQ(::chown(h.dest.c_str(), k_attacker_uid, k_attacker_gid), 0);
  auto q = h.queue(std::chrono::milliseconds(10));
  // The epilog claims it while the daemon saves the hand-over: the daemon's claim finds nothing.
  std::optional<Result<std::string>> epilogs;
  StageOutQueue::hooks().before_claim = [&] {
    epilogs = tmpdir::renew_stage_out(h.n.base_fd().get(), k_job.job_id, h.end.pending);
  };
  auto taken = q->take(h.end, k_job);
  StageOutQueue::hooks() = {};
  ASSERT_TRUE(epilogs && *epilogs) << "the seam ran, and the epilog's claim took it";
  ASSERT_FALSE(taken);
  EXPECT_NE(taken.error().message.find("the epilog stopped waiting"), std::string::npos) << taken.error().message;
  EXPECT_TRUE(q->pending().empty());
  EXPECT_TRUE(h.on_disk().empty()) << "the saved name is taken back";
  EXPECT_TRUE(exists_nofollow(h.n.base + "/" + **epilogs + "/result")) << "the epilog's to copy";
  EXPECT_FALSE(exists_nofollow(h.dest + "/result"));
  // Asked again (a second request of the same hand-over): the name it was handed is gone.
  auto again_taken = q->take(h.end, k_job);
  ASSERT_FALSE(again_taken);
  EXPECT_EQ(again_taken.error().code, ETIMEDOUT) << again_taken.error().message;

  // The daemon claimed it first: the epilog's claim finds nothing, and the daemon's copy is made.
  proto::EndJob again = h.end;
  again.pending = **epilogs; // (the same directory, under the name it has now)
  auto daemons = q->take(again, k_job);
  ASSERT_TRUE(daemons) << daemons.error().message;
  EXPECT_TRUE(exists_nofollow(h.n.base + "/" + *daemons)) << "claimed under the name take() returned";
  auto late = tmpdir::renew_stage_out(h.n.base_fd().get(), k_job.job_id, again.pending);
  ASSERT_FALSE(late);
  EXPECT_EQ(late.error().code, ENOENT);
  EXPECT_TRUE(wait_until([&] { return q->pending().empty(); }, std::chrono::seconds(60)));
  EXPECT_EQ(read_file(h.dest + "/result"), "42");
  EXPECT_TRUE(stageout::load_kept(h.n.base_fd().get()).empty()) << "nothing kept: the copy is complete";
}

// A hand-over that cannot be saved (the daemon's state directory gone, full, read-only) is neither
// kept nor claimed: the epilog copies it where it is.
TEST(StageOutQueue, AHandOverThatCannotBeSavedIsNotClaimed)
{
  STAGEHAND_REQUIRE_ROOT();
  HandedOver h;
  const std::string gone = h.n.dir / "gone-state";
  ASSERT_EQ(::mkdir(gone.c_str(), 0700), 0);
  UniqueFd gone_fd(::open(gone.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_EQ(::rmdir(gone.c_str()), 0); // nothing can be made in it any more
  auto q = std::make_shared<StageOutQueue>(h.n.config, "n1", gone_fd.get(), std::chrono::milliseconds(10));
  auto taken = q->take(h.end, k_job);
  ASSERT_FALSE(taken);
  EXPECT_TRUE(q->pending().empty());
  EXPECT_TRUE(exists_nofollow(h.n.base + "/" + h.end.pending + "/result")) << "not renamed: the epilog's";
}

// A saved hand-over whose directory is not there when its copy starts (a restart between the save
// and the claim, after which the epilog copied it): forgotten, with no results kept for it.
TEST(StageOutQueue, AResumedCopyWhoseDirectoryIsNotThereIsForgotten)
{
  STAGEHAND_REQUIRE_ROOT();
  HandedOver h;
  stageout::PendingCopy p;
  p.job_id = k_job.job_id;
  p.uid = k_attacker_uid;
  p.gid = k_attacker_gid;
  p.dir = tmpdir::fresh_stage_out_name(k_job.job_id); // saved, never renamed to
  p.specs = h.end.stage_out;
  p.fallback_dir = h.end.stage_out_dir;
  ASSERT_TRUE(stageout::save_pending(h.state.get(), {p}));
  auto q = h.queue(std::chrono::milliseconds(10));
  q->resume();
  EXPECT_TRUE(wait_until([&] { return q->pending().empty(); }, std::chrono::seconds(60)));
  EXPECT_TRUE(h.on_disk().empty());
  EXPECT_TRUE(stageout::load_kept(h.n.base_fd().get()).empty()) << "no record of results that are not there";
  EXPECT_TRUE(exists_nofollow(h.n.base + "/" + h.end.pending + "/result")) << "another directory is not touched";
}

namespace {

// A job with a result, whose --stage-out copies it into `dest` (made here, the job user's).
job::StageOutJob a_job_to_hand_over(Node& n, const std::string& dest)
{
  EXPECT_EQ(::mkdir(dest.c_str(), 0755), 0);
  EXPECT_EQ(::chown(dest.c_str(), k_attacker_uid, k_attacker_gid), 0);
  a_job_with_a_result(n);
  auto specs = stageout::parse_option("result:" + dest + "/result");
  EXPECT_TRUE(specs);
  return job::StageOutJob{specs ? stageout::canonical_option(*specs, n.dir.path()) : "", n.dir.path()};
}

// A socket listening where the node's daemon's would (a stand-in's); invalid if it cannot.
UniqueFd listening_as_the_daemon(const Node& n)
{
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string& sock = n.config.daemon.socket;
  if (sock.size() >= sizeof addr.sun_path) {
    return UniqueFd();
  }
  std::copy(sock.begin(), sock.end(), addr.sun_path);
  if (::bind(listener.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listener.get(), 4) != 0) {
    return UniqueFd();
  }
  return listener;
}

} // namespace

// The epilog's side: no answer from the daemon (here a stand-in that reads the hand-over, claims
// the directory as a daemon woken late would, and closes without a word). The epilog's own claim
// then finds nothing: it copies nothing and says why.
TEST(StageOutHandOver, AnEpilogWhoseDaemonClaimedTheDirectoryLateLeavesTheCopyToIt)
{
  STAGEHAND_REQUIRE_ROOT();
  Node n;
  const std::string dest = n.dir / "dest";
  const job::StageOutJob out = a_job_to_hand_over(n, dest);
  UniqueFd listener = listening_as_the_daemon(n);
  ASSERT_TRUE(listener.valid());
  std::string daemons; // the name the stand-in claimed it as
  std::thread late_daemon([&] {
    UniqueFd c(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    char buf[4096];
    (void)::recv(c.get(), buf, sizeof buf, 0); // the end_job request
    for (const auto& e : std::filesystem::directory_iterator(n.base)) {
      if (const std::string name = e.path().filename(); name.starts_with(".stageout.job_")) {
        auto claimed = tmpdir::renew_stage_out(n.base_fd().get(), k_job.job_id, name);
        daemons = claimed ? *claimed : "";
      }
    }
  }); // (its connection closes unanswered)
  auto ended = job::job_end(n.config, Node::job(), tmpdir::Request::create, std::chrono::seconds(5), out);
  late_daemon.join();
  ASSERT_TRUE(ended) << ended.error().message;
  ASSERT_FALSE(daemons.empty());
  EXPECT_NE(ended->find("the node daemon took the stage-out after all"), std::string::npos) << *ended;
  EXPECT_FALSE(exists_nofollow(dest + "/result")) << "the epilog copied nothing: " << *ended;
  EXPECT_EQ(read_file(n.base + "/" + daemons + "/result"), "42") << "left in place for the daemon's copy";
}

// A daemon older than the hand-over ignores `pending` and answers "done": nobody would copy the
// results. The epilog takes a hand-over only from an answer that says the daemon took it (the
// name it claimed), and copies itself otherwise.
TEST(StageOutHandOver, AnEpilogWhoseDaemonAnswersDoneWithoutTakingTheStageOutCopiesItself)
{
  STAGEHAND_REQUIRE_ROOT();
  Node n;
  const std::string dest = n.dir / "dest";
  const job::StageOutJob out = a_job_to_hand_over(n, dest);
  UniqueFd listener = listening_as_the_daemon(n);
  ASSERT_TRUE(listener.valid());
  std::thread old_daemon([&] { // own thread: a test's (a daemon's stand-in)
    UniqueFd c(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
    char buf[4096];
    (void)::recv(c.get(), buf, sizeof buf, 0); // the end_job request, its `pending` not understood
    const std::string done = proto::encode_frame(proto::serialize_result(proto::Done{}));
    (void)::send(c.get(), done.data(), done.size(), MSG_NOSIGNAL);
  });
  auto ended = job::job_end(n.config, Node::job(), tmpdir::Request::create, std::chrono::seconds(5), out);
  old_daemon.join();
  ASSERT_TRUE(ended) << ended.error().message;
  EXPECT_NE(ended->find("the daemon answered without taking the stage-out"), std::string::npos) << *ended;
  EXPECT_EQ(read_file(dest + "/result"), "42") << "the epilog copied the results: " << *ended;
}

TEST(StageOutQueue, TakesOnlyTheJobsOwnStageOutDirectory)
{
  STAGEHAND_REQUIRE_ROOT();
  HandedOver h;
  auto q = h.queue(std::chrono::milliseconds(10));
  for (const std::string& name : {std::string("job_555"), std::string(".stageout.job_556.1"), "../" + h.end.pending,
                                 std::string(".stageout.job_555.none")}) {
    proto::EndJob other = h.end;
    other.pending = name;
    auto taken = q->take(other, k_job);
    EXPECT_FALSE(taken) << name;
    EXPECT_TRUE(q->pending().empty()) << name;
  }
  EXPECT_TRUE(h.on_disk().empty());
}

// A kept record that names the job's own directory (its move aside failed: a FUSE mount on it, say)
// is never retried: after a requeue that name is the new run's running directory, which a retry
// would have renamed, copied and removed.
TEST(StageOutRetry, ARecordNamingTheJobsOwnDirectoryIsNotRetried)
{
  STAGEHAND_REQUIRE_ROOT();
  Node n;
  a_job_with_a_result(n); // the requeued run's directory, running
  stageout::KeptResults k{k_job.job_id, k_attacker_uid, k_attacker_gid, tmpdir::job_dir_name(k_job.job_id),
                          "result:" + (n.dir / "dest/result"), n.dir.path(), std::time(nullptr) + 3600, "DEST full"};
  ASSERT_TRUE(stageout::save_kept(n.base_fd().get(), k));
  auto said = job::retry_kept(n.config, "n1", k_job.job_id, k_attacker_uid, std::chrono::seconds(30));
  ASSERT_FALSE(said);
  EXPECT_NE(said.error().message.find("the job's own directory, which a later run of the job replaces: not retried"),
            std::string::npos)
    << said.error().message;
  EXPECT_EQ(read_file(n.job_dir() + "/result"), "42"); // still there, in place
}

// A long reason is cut, never inside a UTF-8 character: the record is still written.
TEST(StageOutRetry, ALongReasonIsCutBetweenCharacters)
{
  STAGEHAND_REQUIRE_ROOT();
  Node n;
  ASSERT_TRUE(tmpdir::on_job_start(n.config, Node::job())); // (the base)
  stageout::KeptResults k{k_job.job_id, k_attacker_uid, k_attacker_gid, ".stageout.job_555.x", "out:/d", "/d",
                          std::time(nullptr) + 3600, std::string(1999, 'a') + "\xc3\xa9 and more"};
  auto saved = stageout::save_kept(n.base_fd().get(), k);
  ASSERT_TRUE(saved) << saved.error().message;
  auto kept = stageout::load_kept(n.base_fd().get());
  ASSERT_EQ(kept.size(), 1U);
  EXPECT_EQ(kept[0].reason, std::string(1999, 'a') + "...");
}

// A requeued job's later run ends while its earlier run's copy is still being retried: the later
// copy waits for it, so the later run's files are what DEST holds (as the user guide says), and no
// two copies write one DEST file at once (a shared temporary name tore files).
TEST(StageOutQueue, ARequeuedRunsCopyComesAfterTheEarlierRunsCopy)
{
  STAGEHAND_REQUIRE_ROOT();
  HandedOver h; // run 1: `result` 42; DEST root's, so its first attempt fails
  std::atomic<int> failed{0};
  StageOutQueue::hooks().after_attempt = [&](const stageout::PendingCopy&, bool complete) { failed += !complete; };
  struct Unhook
  {
    ~Unhook() { StageOutQueue::hooks().after_attempt = nullptr; }
  } unhook;
  auto q = h.queue(std::chrono::milliseconds(1500));
  ASSERT_TRUE(q->take(h.end, k_job));
  EXPECT_TRUE(wait_until([&] { return failed.load() >= 1; }, std::chrono::seconds(30))); // it waits to retry
  a_job_with_a_result(h.n);                                     // run 2, requeued onto this node
  write_file(h.n.job_dir() + "/result", "run2");
  ASSERT_EQ(::chown((h.n.job_dir() + "/result").c_str(), k_attacker_uid, k_attacker_gid), 0);
  auto aside = tmpdir::on_job_end(h.n.config, Node::job(), tmpdir::Request::create, tmpdir::EndMove::to_stage_out);
  ASSERT_TRUE(aside && aside->pending);
  proto::EndJob later = h.end;
  later.pending = *aside->pending;
  ASSERT_EQ(::chown(h.dest.c_str(), k_attacker_uid, k_attacker_gid), 0); // DEST writable from now on
  ASSERT_TRUE(q->take(later, k_job));
  EXPECT_TRUE(wait_until([&] { return q->pending().empty(); }, std::chrono::seconds(60)));
  EXPECT_EQ(read_file(h.dest + "/result"), "run2");
}

// A daemon restarted with another [tmpdir] base still copies what was pending under the old one:
// each pending copy names the base its directory is under (a list from before names none: the
// daemon's).
TEST(StageOutQueue, ACopyPendingUnderTheOldBaseIsCopiedAfterARestartWithANewOne)
{
  STAGEHAND_REQUIRE_ROOT();
  HandedOver h;
  ASSERT_EQ(::chown(h.dest.c_str(), k_attacker_uid, k_attacker_gid), 0);
  stageout::PendingCopy p{k_job.job_id, k_attacker_uid, k_attacker_gid, h.end.pending, h.end.stage_out,
                          h.end.stage_out_dir, 0, h.n.config.tmpdir.base};
  ASSERT_TRUE(stageout::save_pending(h.state.get(), {p}));
  Config moved = h.n.config;
  moved.tmpdir.base = "/nonexistent/%n";
  auto q = std::make_shared<StageOutQueue>(moved, "n1", h.state.get(), std::chrono::milliseconds(10));
  q->resume();
  EXPECT_TRUE(wait_until([&] { return q->pending().empty(); }, std::chrono::seconds(60)));
  EXPECT_EQ(read_file(h.dest + "/result"), "42");
}
