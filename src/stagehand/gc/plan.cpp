// The GC decision table.
#include "stagehand/gc/plan.hpp"

#include "stagehand/tmpdir/job_dir.hpp"
#include "stagehand/util/units.hpp"

#include <algorithm>
#include <string_view>

namespace stagehand::gc {

namespace {

constexpr std::string_view k_job_prefix = "job_";
constexpr std::string_view k_keep_prefix = ".keep.job_";
constexpr std::string_view k_trash_prefix = ".trash.";
constexpr std::string_view k_new_prefix = ".new.";

} // namespace

const char* reason_name(Reason r)
{
  switch (r) {
  case Reason::trash:
    return "trash";
  case Reason::expired:
    return "keep_for expired";
  case Reason::orphan:
    return "orphan: the job no longer runs on this node";
  case Reason::stale_marker:
    return "stale keep marker or stage-out record";
  case Reason::leftover:
    return "leftover of an interrupted create";
  }
  return "?";
}

const char* reason_label(Reason r)
{
  switch (r) {
  case Reason::trash:
    return "trash";
  case Reason::expired:
    return "expired";
  case Reason::orphan:
    return "orphan";
  case Reason::stale_marker:
    return "stale_marker";
  case Reason::leftover:
    return "leftover";
  }
  return "?";
}

std::optional<std::uint32_t> job_of_dir(const std::string& name)
{
  std::string_view n = name;
  if (!n.starts_with(k_job_prefix)) {
    return std::nullopt;
  }
  return parse_u32(n.substr(k_job_prefix.size()));
}

std::optional<std::uint32_t> job_of_marker(const std::string& name)
{
  std::string_view n = name;
  if (!n.starts_with(k_keep_prefix)) {
    return std::nullopt;
  }
  return parse_u32(n.substr(k_keep_prefix.size()));
}

namespace {

// A ".stageout." directory without a record that no one is copying from and that has not changed
// for a while; whether its job ended is the caller's question.
bool stray_candidate(const Snapshot& snapshot, const Evidence& evidence, const Options& options, const BaseEntry& e)
{
  if (!e.is_dir || !tmpdir::job_of_stage_out(e.name) || snapshot.kept_until.count(e.name) > 0) {
    return false;
  }
  if (!evidence.pending_stage_outs || evidence.pending_stage_outs->count(e.name) > 0) {
    return false; // the daemon's, or unknown: kept as a copy in progress
  }
  return snapshot.now - std::max(e.mtime, e.ctime) >= options.stray_after_seconds;
}

} // namespace

bool needs_slurmctld(const Snapshot& snapshot, const Evidence& evidence, const Options& options)
{
  for (const auto& e : snapshot.entries) {
    if (stray_candidate(snapshot, evidence, options, e) && evidence.live_steps.count(*tmpdir::job_of_stage_out(e.name)) == 0) {
      return true; // only slurmctld can say its job ended
    }
    auto job = job_of_dir(e.name);
    if (!job || !e.is_dir || evidence.live_steps.count(*job)) {
      continue;
    }
    auto marker = snapshot.markers.find(*job);
    if (marker == snapshot.markers.end() || (marker->second.ino != 0 && marker->second.ino != e.ino)) {
      return true; // neither running here nor provably ended: only slurmctld can tell
    }
  }
  return false;
}

namespace {

// What make_plan decides from, and the plan it builds.
struct Planner
{
  const Snapshot& snapshot;
  const Evidence& evidence;
  const Options& options;
  Plan plan;
  std::set<std::uint32_t> dirs; // the jobs with a directory
};

bool old_enough(const Planner& p, const BaseEntry& e) { return p.snapshot.now - e.mtime >= p.options.grace_seconds; }

// A ".stageout." directory. Without a record: a copy in progress (the daemon's or an epilog's),
// never touched. With one: results kept after a failed copy, until their time is up.
void plan_stage_out(Planner& p, const BaseEntry& e, std::uint32_t job)
{
  auto kept = p.snapshot.kept_until.find(e.name);
  if (kept != p.snapshot.kept_until.end() && kept->second <= p.snapshot.now) {
    p.plan.remove.push_back(Action{e.name, Reason::expired, job, e.ino, e.mounted});
  }
  const bool ended = p.evidence.live_steps.count(job) == 0 && p.evidence.running_here &&
                     p.evidence.running_here->count(job) == 0;
  if (ended && stray_candidate(p.snapshot, p.evidence, p.options, e)) {
    p.plan.strays.push_back(Stray{e.name, job, e.uid, p.snapshot.now + p.options.keep_for_seconds});
  }
}

// A job's directory "job_<id>": running, kept, unsure, or an orphan to remove.
void plan_job_dir(Planner& p, const BaseEntry& e, std::uint32_t job)
{
  p.dirs.insert(job);
  const bool live = p.evidence.live_steps.count(job) > 0 ||
                    (p.evidence.running_here && p.evidence.running_here->count(job) > 0);
  if (live) {
    p.plan.jobs[job] = JobDirState::running;
    return;
  }
  // A keep marker naming this very directory was written by the job's epilog: the job ended here,
  // and no later run of it has started (its prolog would have made a new directory).
  auto marker = p.snapshot.markers.find(job);
  const bool marker_is_ours =
    marker != p.snapshot.markers.end() && (marker->second.ino == 0 || marker->second.ino == e.ino);
  if (marker_is_ours) {
    // Stage-out results kept in it stay at least until their record says.
    auto kept = p.snapshot.kept_until.find(e.name);
    const bool expired = marker->second.until <= p.snapshot.now &&
                         (kept == p.snapshot.kept_until.end() || kept->second <= p.snapshot.now);
    p.plan.jobs[job] = expired ? JobDirState::orphan : JobDirState::kept;
    if (expired) {
      p.plan.remove.push_back(Action{e.name, Reason::expired, job, e.ino, e.mounted});
    }
    return;
  }
  if (!p.evidence.running_here) {
    // slurmctld did not answer: a job not proven ended keeps its directory.
    p.plan.jobs[job] = JobDirState::unsure;
    return;
  }
  if (p.evidence.registered_running.count(job) == 0 && !old_enough(p, e)) {
    p.plan.jobs[job] = JobDirState::unsure; // just made by a prolog the daemon has not heard of yet
    return;
  }
  p.plan.jobs[job] = JobDirState::orphan;
  p.plan.remove.push_back(Action{e.name, Reason::orphan, job, e.ino, e.mounted});
}

// One entry of the base directory; names not ours are never touched.
void plan_entry(Planner& p, const BaseEntry& e)
{
  std::string_view n = e.name;
  if (n.starts_with(k_trash_prefix)) {
    p.plan.remove.push_back(Action{e.name, Reason::trash, 0, e.ino, e.mounted});
    return;
  }
  if (n.starts_with(k_new_prefix) || (n.starts_with(k_keep_prefix) && !job_of_marker(e.name))) {
    if (old_enough(p, e)) { // a create or a marker write that was interrupted
      p.plan.remove.push_back(Action{e.name, Reason::leftover, 0, e.ino, e.mounted});
    }
    return;
  }
  if (auto job = tmpdir::job_of_stage_out(e.name); job && e.is_dir) {
    plan_stage_out(p, e, *job);
    return;
  }
  if (auto job = job_of_dir(e.name); job && e.is_dir) {
    plan_job_dir(p, e, *job);
  }
}

// Mount points decided on are detached, then removed; the others (a running or kept job's,
// a copy in progress, names not ours) stay, and are reported.
void plan_mount_points(const Snapshot& snapshot, Plan& plan)
{
  for (const auto& name : snapshot.mount_points) {
    const bool decided = std::any_of(plan.remove.begin(), plan.remove.end(), [&](const Action& a) { return a.name == name; });
    auto job = job_of_dir(name);
    const bool job_keeps = job && plan.jobs.count(*job) > 0 &&
                           (plan.jobs.at(*job) == JobDirState::running || plan.jobs.at(*job) == JobDirState::kept);
    if (!decided && !job_keeps) {
      plan.mount_points.push_back(name);
    }
  }
}

// Records of kept stage-out results whose directory is gone.
void plan_stale_records(const Snapshot& snapshot, Plan& plan)
{
  for (const auto& kept : snapshot.kept_until) {
    const std::string& dir = kept.first;
    // A mount point is there too (never entered): its record stays with it.
    const bool there = std::any_of(snapshot.entries.begin(), snapshot.entries.end(),
                                   [&](const BaseEntry& e) { return e.is_dir && e.name == dir; }) ||
                       std::find(snapshot.mount_points.begin(), snapshot.mount_points.end(), dir) !=
                         snapshot.mount_points.end();
    if (!there) {
      plan.remove.push_back(Action{tmpdir::kept_record_name(dir), Reason::stale_marker, 0, 0});
    }
  }
}

// Markers of directories that are gone, or that belong to an earlier instance of the directory.
void plan_stale_markers(const Snapshot& snapshot, const std::set<std::uint32_t>& dirs, Plan& plan)
{
  for (const auto& [job, marker] : snapshot.markers) {
    bool dir_exists = dirs.count(job) > 0;
    std::uint64_t dir_ino = 0;
    for (const auto& e : snapshot.entries) {
      if (e.is_dir && job_of_dir(e.name) == job) {
        dir_ino = e.ino;
      }
    }
    const bool stale = !dir_exists || (marker.ino != 0 && marker.ino != dir_ino);
    if (stale) {
      // (The inode it names, checked again before it goes: an epilog may write it anew meanwhile.)
      plan.remove.push_back(Action{".keep.job_" + std::to_string(job), Reason::stale_marker, 0, marker.ino});
    }
  }
}

} // namespace

Plan make_plan(const Snapshot& snapshot, const Evidence& evidence, const Options& options)
{
  Planner p{snapshot, evidence, options, {}, {}};
  for (const auto& e : snapshot.entries) {
    plan_entry(p, e);
  }
  plan_mount_points(snapshot, p.plan);
  plan_stale_records(snapshot, p.plan);
  plan_stale_markers(snapshot, p.dirs, p.plan);
  return std::move(p.plan);
}

} // namespace stagehand::gc
