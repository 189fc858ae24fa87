// Garbage collection's decision table: what goes, what stays, and that "unsure" means keep.
#include "stagehand/gc/collect.hpp"
#include "stagehand/gc/plan.hpp"
#include "stagehand/stageout/kept.hpp"
#include "stagehand/stageout/pending.hpp"
#include "stagehand/tmpdir/job_dir.hpp"
#include "stagehand/util/fd.hpp"

#include "test_support.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

using namespace stagehand;
using namespace stagehand::gc;
using namespace stagehand::test;

namespace {

constexpr std::int64_t k_now = 1'000'000;

BaseEntry dir(const std::string& name, std::uint64_t ino, std::int64_t age = 600)
{
  return BaseEntry{name, true, 1001, k_now - age, ino};
}

std::map<std::string, Reason> removed(const Plan& p)
{
  std::map<std::string, Reason> out;
  for (const auto& a : p.remove) {
    out[a.name] = a.reason;
  }
  return out;
}

Evidence ctld(std::set<std::uint32_t> running) // slurmctld answered
{
  Evidence e;
  e.running_here = std::move(running);
  return e;
}

} // namespace

TEST(GcPlan, RunningJobsAreNeverRemoved)
{
  Snapshot s{{dir("job_1", 11), dir("job_2", 12), dir("job_3", 13)}, {}, k_now, {}, {}};
  Evidence e = ctld({2});
  e.live_steps = {1};
  auto p = make_plan(s, e);
  auto r = removed(p);
  EXPECT_EQ(r.count("job_1"), 0U); // a slurmstepd of it runs here
  EXPECT_EQ(r.count("job_2"), 0U); // slurmctld says it runs here
  EXPECT_EQ(r.at("job_3"), Reason::orphan);
  EXPECT_EQ(p.jobs.at(1), JobDirState::running);
  EXPECT_EQ(p.jobs.at(3), JobDirState::orphan);
}

TEST(GcPlan, WithoutSlurmctldOnlyProvenEndsGo)
{
  // slurmctld is down: a directory with no live step and no marker may belong to a running job.
  Snapshot s{{dir("job_1", 11), dir("job_2", 12), dir(".trash.job_5.1", 15)}, {{2, KeepMarker{k_now - 1, 12}}}, k_now, {}, {}};
  Evidence e; // running_here = nullopt
  EXPECT_TRUE(needs_slurmctld(s, e));
  auto r = removed(make_plan(s, e));
  EXPECT_EQ(r.count("job_1"), 0U);
  EXPECT_EQ(r.at("job_2"), Reason::expired); // its epilog wrote the marker: it ended
  EXPECT_EQ(r.at(".trash.job_5.1"), Reason::trash);
}

TEST(GcPlan, KeepMarkersBelongToOneInstance)
{
  // A requeued job with --tmpdir=keep: the marker of its first run names another inode.
  Snapshot s{{dir("job_7", 77)}, {{7, KeepMarker{k_now - 10, 70}}}, k_now, {}, {}};
  auto running = ctld({7});
  auto p = make_plan(s, running);
  auto r = removed(p);
  EXPECT_EQ(r.count("job_7"), 0U); // the running instance is never expired
  EXPECT_EQ(r.at(".keep.job_7"), Reason::stale_marker);
  // Kept and not yet expired: stays, whatever slurmctld says.
  Snapshot kept{{dir("job_8", 88)}, {{8, KeepMarker{k_now + 10, 88}}}, k_now, {}, {}};
  EXPECT_TRUE(removed(make_plan(kept, ctld({}))).empty());
  EXPECT_EQ(make_plan(kept, ctld({})).jobs.at(8), JobDirState::kept);
  EXPECT_FALSE(needs_slurmctld(kept, Evidence{}));
}

TEST(GcPlan, YoungEntriesAndForeignNamesStay)
{
  Snapshot s{{dir("job_1", 11, 2), dir(".new.job_2.5", 12, 2), dir(".new.job_3.5", 13, 600), dir("lost+found", 14),
              BaseEntry{"job_4", false, 0, k_now - 600, 16}, dir("job_x", 15)},
             {},
             k_now,
             {},
             {}};
  auto r = removed(make_plan(s, ctld({})));
  EXPECT_EQ(r.count("job_1"), 0U);       // just made by a prolog the daemon may not know yet
  EXPECT_EQ(r.count(".new.job_2.5"), 0U); // a create in progress
  EXPECT_EQ(r.at(".new.job_3.5"), Reason::leftover);
  EXPECT_EQ(r.count("lost+found"), 0U);
  EXPECT_EQ(r.count("job_4"), 0U); // not a directory: not ours
  EXPECT_EQ(r.count("job_x"), 0U);
  // A registered running job's directory is never "young and unknown": it is decided on evidence.
  Evidence e = ctld({});
  e.registered_running = {1};
  EXPECT_EQ(removed(make_plan(s, e)).at("job_1"), Reason::orphan);
}

TEST(GcEvidence, SqueueAndProc)
{
  STAGEHAND_REQUIRE_ROOT(); // fake /proc entries owned by root and by a user
  EXPECT_EQ(parse_squeue_ids("12\n 13 \n\nx\n4294967295\n"), (std::set<std::uint32_t>{12, 13, 4294967295U}));
  STAGEHAND_REQUIRE_ROOT(); // slurmstepd is root's: the stand-in /proc entries must be too
  TempDir proc;
  auto task = [&](const std::string& pid, const std::string& cmdline, const std::string& comm = "slurmstepd\n") {
    ::mkdir((proc / pid).c_str(), 0755);
    write_file(proc / (pid + "/cmdline"), cmdline);
    write_file(proc / (pid + "/comm"), comm);
  };
  task("100", std::string("slurmstepd: [41.batch]") + '\0');
  task("101", std::string("slurmstepd: [42.0]\0\0\0", 22));
  task("102", std::string("slurmstepd: [43.extern]"));
  task("103", std::string("/usr/bin/python3\0slurmstepd: [44.0]", 34));
  task("self", "slurmstepd: [45.0]");
  task("104", "slurmstepd: [46.0]", "python3\n"); // a user's process dressed up as one: not read
  // A user's process named slurmstepd: its cmdline is never read (it could block on its memory map).
  task("105", "slurmstepd: [47.0]");
  ::chown((proc / "105").c_str(), k_attacker_uid, k_attacker_gid);
  EXPECT_EQ(live_step_jobs(proc.path()), (std::set<std::uint32_t>{41, 42, 43}));
}

TEST(GcPlan, StageOutResultsStayWhileCopyingAndUntilTheirRecordExpires)
{
  // In progress (no record): never touched, whatever its age. Kept after a failed copy: stays
  // until its record's time, then goes with the record. A record without its directory goes.
  Snapshot s{{dir(".stageout.job_7.a", 21, 999999), dir(".stageout.job_8.b", 22), dir(".stageout.job_9.c", 23),
              BaseEntry{".failed-stage-out.stageout.job_8.b", false, 0, k_now, 31},
              BaseEntry{".failed-stage-out.stageout.job_9.c", false, 0, k_now, 32},
              BaseEntry{".failed-stage-out.stageout.job_6.z", false, 0, k_now, 33}},
             {},
             k_now,
             {},
             {}};
  s.kept_until = {{".stageout.job_8.b", k_now + 10}, {".stageout.job_9.c", k_now}, {".stageout.job_6.z", k_now + 10}};
  auto r = removed(make_plan(s, ctld({})));
  EXPECT_EQ(r.count(".stageout.job_7.a"), 0U);
  EXPECT_EQ(r.count(".stageout.job_8.b"), 0U);
  EXPECT_EQ(r.at(".stageout.job_9.c"), Reason::expired);
  EXPECT_EQ(r.at(".failed-stage-out.stageout.job_6.z"), Reason::stale_marker);
  EXPECT_EQ(r.count(".failed-stage-out.stageout.job_8.b"), 0U);
  EXPECT_EQ(r.size(), 2U);
}

TEST(GcPlan, AKeptRecordStaysWithAMountedDirectoryAndOutlivesAKeepMarker)
{
  // A user's mount on the kept directory hides it from the entries, never its record; and a
  // job_<id> with results recorded in it stays while the record runs, whatever its marker says.
  Snapshot s{{dir("job_4", 14),
              BaseEntry{".failed-stage-out.stageout.job_3.m", false, 0, k_now, 31},
              BaseEntry{".failed-stage-out.job_4", false, 0, k_now, 32}},
             {{4, KeepMarker{k_now - 5, 14}}},
             k_now,
             {".stageout.job_3.m"},
             {}};
  s.kept_until = {{".stageout.job_3.m", k_now + 10}, {"job_4", k_now + 10}};
  auto r = removed(make_plan(s, ctld({})));
  EXPECT_TRUE(r.empty()) << r.size();
  s.now = k_now + 10;
  r = removed(make_plan(s, ctld({})));
  EXPECT_EQ(r.at("job_4"), Reason::expired);
  EXPECT_EQ(r.count(".failed-stage-out.stageout.job_3.m"), 0U); // its directory is still mounted there
}

TEST(KeptNames, ARetryRenewsTheNameSoAnyoneHoldingTheOldOneFindsNothing)
{
  TempDir base;
  ASSERT_EQ(::mkdir((base.path() + "/.stageout.job_5.x").c_str(), 0700), 0);
  UniqueFd fd(::open(base.path().c_str(), O_RDONLY | O_DIRECTORY));
  auto renewed = tmpdir::renew_stage_out(fd.get(), 5, ".stageout.job_5.x");
  ASSERT_TRUE(renewed);
  EXPECT_TRUE(renewed->starts_with(".stageout.job_5."));
  EXPECT_TRUE(exists_nofollow(base.path() + "/" + *renewed));
  EXPECT_FALSE(exists_nofollow(base.path() + "/.stageout.job_5.x"));
  EXPECT_FALSE(tmpdir::renew_stage_out(fd.get(), 5, ".stageout.job_5.x")); // the second retry
  EXPECT_FALSE(tmpdir::renew_stage_out(fd.get(), 6, *renewed));            // another job's
  EXPECT_FALSE(tmpdir::renew_stage_out(fd.get(), 5, "../etc"));
}

// A name that starts as job 5's stage-out name but walks out of the base (`x/../../victim`) is no
// stage-out name: it is neither renamed (claimed, moved to the trash) nor read as job 5's.
TEST(KeptNames, ANameWithASlashIsNoStageOutNameAndIsNeverRenamed)
{
  TempDir top;
  const std::string base = top.path() + "/base";
  ASSERT_EQ(::mkdir(base.c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((base + "/.stageout.job_5.x").c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((top.path() + "/victim").c_str(), 0700), 0);
  UniqueFd fd(::open(base.c_str(), O_RDONLY | O_DIRECTORY));
  const std::string walks_out = ".stageout.job_5.x/../../victim";
  EXPECT_EQ(tmpdir::job_of_stage_out(walks_out), std::nullopt);
  EXPECT_EQ(tmpdir::job_of_stage_out(".stageout.job_5.x"), 5U);
  EXPECT_FALSE(tmpdir::renew_stage_out(fd.get(), 5, walks_out));
  EXPECT_FALSE(tmpdir::claim_stage_out(fd.get(), 5, ".stageout.job_5.x", ".stageout.job_5.x/../../moved"));
  EXPECT_FALSE(tmpdir::stage_out_to_trash(fd.get(), walks_out));
  EXPECT_TRUE(exists_nofollow(top.path() + "/victim")) << "not moved into the base";
  EXPECT_FALSE(exists_nofollow(top.path() + "/moved")) << "nothing moved out of the base";
  EXPECT_TRUE(exists_nofollow(base + "/.stageout.job_5.x"));
}

TEST(GcCollect, AKeptRecordKeepsItsResultsAndExpiresWithThem)
{
  TempDir base;
  ASSERT_EQ(::mkdir((base.path() + "/.stageout.job_5.x").c_str(), 0700), 0);
  write_file(base.path() + "/.stageout.job_5.x/ckpt", "weights");
  stageout::KeptResults k{5, 1001, 1001, ".stageout.job_5.x", "out:/home/u/out", "/home/u", k_now + 60, "DEST full"};
  UniqueFd fd(::open(base.path().c_str(), O_RDONLY | O_DIRECTORY));
  ASSERT_TRUE(stageout::save_kept(fd.get(), k));
  auto loaded = stageout::load_kept(fd.get());
  ASSERT_EQ(loaded.size(), 1U);
  EXPECT_EQ(loaded[0], k);
  auto snap = snapshot_base(fd.get(), k_now);
  ASSERT_TRUE(snap);
  EXPECT_EQ(snap->kept_until.at(".stageout.job_5.x"), k_now + 60);
  EXPECT_TRUE(make_plan(*snap, ctld({})).remove.empty());
  // Expired: the directory goes to the trash with its record, in one pass.
  snap = snapshot_base(fd.get(), k_now + 60);
  ASSERT_TRUE(snap);
  auto applied = apply(fd.get(), make_plan(*snap, ctld({})), std::chrono::steady_clock::now() + std::chrono::seconds(10));
  EXPECT_TRUE(applied.failures.empty());
  EXPECT_FALSE(exists_nofollow(base.path() + "/.stageout.job_5.x"));
  EXPECT_FALSE(exists_nofollow(base.path() + "/.failed-stage-out.stageout.job_5.x"));
  EXPECT_TRUE(stageout::load_kept(fd.get()).empty());
}

// GC reads the node daemon's pending copies where that daemon keeps them: a state_dir with "%n"
// (as the test cluster's) is the node's own directory. Read unexpanded, the list was "none" and
// a copy under way for more than stray_after was recorded as a failed stray, then removed.
TEST(GcCollect, PendingStageOutsAreReadFromTheNodesOwnStateDir)
{
  STAGEHAND_REQUIRE_ROOT();
  TempDir top;
  ASSERT_EQ(::chmod(top.path().c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((top.path() + "/n1").c_str(), 0700), 0);
  UniqueFd state(::open((top.path() + "/n1").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(stageout::save_pending(state.get(), {stageout::PendingCopy{5, 1001, 1001, ".stageout.job_5.x", "o:/d",
                                                                          "/home/u", 0}}));
  Config config;
  config.daemon.state_dir = top.path() + "/%n";
  auto pending = pending_stage_outs(config, "n1");
  ASSERT_TRUE(pending);
  EXPECT_EQ(*pending, (std::set<std::string>{".stageout.job_5.x"}));
  auto other = pending_stage_outs(config, "n2"); // no such directory yet: nothing pending there
  ASSERT_TRUE(other);
  EXPECT_TRUE(other->empty());
}

// A stage-out whose paths are not valid UTF-8 gets no record (JSON carries text only): an error
// that says so, never an exception (the epilog's line says so; GC records such a directory as a
// stray later, as any ".stageout." directory no copy runs for).
TEST(KeptNames, ARecordOfPathsThatAreNotUtf8IsAnErrorNotAnException)
{
  TempDir base;
  UniqueFd fd(::open(base.path().c_str(), O_RDONLY | O_DIRECTORY));
  stageout::KeptResults k{5, 1001, 1001, ".stageout.job_5.x", "out:/home/u/r\xe9s", "/home/u", k_now + 60, "full"};
  auto saved = stageout::save_kept(fd.get(), k);
  ASSERT_FALSE(saved);
  EXPECT_EQ(saved.error().message, "a path of the stage-out is not valid UTF-8, which its record cannot carry");
  EXPECT_TRUE(stageout::load_kept(fd.get()).empty());
}

TEST(KeptNames, RecordNamesMapBackToTheirDirectoryOnly)
{
  EXPECT_EQ(tmpdir::kept_record_name(".stageout.job_5.x"), ".failed-stage-out.stageout.job_5.x");
  EXPECT_EQ(tmpdir::kept_record_name("job_5"), ".failed-stage-out.job_5");
  EXPECT_EQ(tmpdir::dir_of_kept_record(".failed-stage-out.stageout.job_5.x"), ".stageout.job_5.x");
  EXPECT_EQ(tmpdir::dir_of_kept_record(".failed-stage-out.job_5"), "job_5");
  EXPECT_FALSE(tmpdir::dir_of_kept_record(".failed-stage-out.etc"));
  EXPECT_FALSE(tmpdir::dir_of_kept_record(".failed-stage-out.job_5/.."));
  EXPECT_FALSE(tmpdir::dir_of_kept_record(".keep.job_5"));
}

// Issue 24, item 6: a ".stageout." directory without a record, not in the daemon's pending list,
// whose job ended and which has not changed for stray_after_seconds, gets a record (never deleted
// unrecorded); anything less proven stays a copy in progress.
TEST(GcPlan, AStrayStageOutIsRecordedOnlyWhenNothingCanStillCopyIt)
{
  Options o;
  o.stray_after_seconds = 3600;
  o.keep_for_seconds = 100;
  auto stage = [](const std::string& name, std::int64_t age) {
    BaseEntry e = dir(name, 40, age);
    e.ctime = k_now - age;
    return e;
  };
  Snapshot s{{stage(".stageout.job_1.a", 7200), stage(".stageout.job_2.b", 7200), stage(".stageout.job_3.c", 60),
              stage(".stageout.job_4.d", 7200), stage(".stageout.job_5.e", 7200), stage(".stageout.job_6.f", 7200)},
             {},
             k_now,
             {},
             {}};
  s.kept_until = {{".stageout.job_6.f", k_now + 10}}; // already recorded
  s.entries[1].ctime = k_now - 60;                    // taken away or handed back a minute ago
  Evidence e = ctld({4});                             // job 4 still runs here
  e.live_steps = {5};
  e.pending_stage_outs = std::set<std::string>{};
  auto p = make_plan(s, e, o);
  ASSERT_EQ(p.strays.size(), 1U);
  EXPECT_EQ(p.strays[0].name, ".stageout.job_1.a");
  EXPECT_EQ(p.strays[0].job_id, 1U);
  EXPECT_EQ(p.strays[0].until, k_now + 100);
  EXPECT_TRUE(p.remove.empty());
  Evidence unasked;
  unasked.pending_stage_outs = std::set<std::string>{};
  EXPECT_TRUE(needs_slurmctld(s, unasked, o));

  e.pending_stage_outs = std::set<std::string>{".stageout.job_1.a"}; // the daemon's
  EXPECT_TRUE(make_plan(s, e, o).strays.empty());
  e.pending_stage_outs.reset(); // its list could not be read
  EXPECT_TRUE(make_plan(s, e, o).strays.empty());
  Evidence no_ctld;
  no_ctld.pending_stage_outs = std::set<std::string>{};
  EXPECT_TRUE(make_plan(s, no_ctld, o).strays.empty()); // slurmctld did not answer
}

// Issue 24, item 3: a mount point is decided on like the directory under it (its inode from
// readdir): an ended job's or the trash's is removed (detached first), a running job's stays
// unreported.
TEST(GcPlan, MountPointsAreDecidedOnLikeTheirDirectories)
{
  auto mounted = [](const std::string& name, std::uint64_t ino) {
    BaseEntry e{name, true, 0, 0, ino};
    e.mounted = Mounted::yes;
    return e;
  };
  Snapshot s{{mounted("job_1", 11), mounted("job_2", 12), mounted(".trash.job_3.x", 13), mounted("lost+found", 14)},
             {},
             k_now,
             {"job_1", "job_2", ".trash.job_3.x", "lost+found"},
             {}};
  auto p = make_plan(s, ctld({2}));
  auto r = removed(p);
  EXPECT_EQ(r.at("job_1"), Reason::orphan);
  EXPECT_EQ(r.at(".trash.job_3.x"), Reason::trash);
  EXPECT_EQ(r.count("job_2"), 0U);
  for (const auto& a : p.remove) {
    EXPECT_EQ(a.mounted, Mounted::yes) << a.name;
  }
  EXPECT_EQ(p.mount_points, std::vector<std::string>{"lost+found"}); // not ours: reported, left
}
