// Garbage collection as a pure decision: from a snapshot of the base directory, the evidence of
// which jobs still run on this node, and the time, it says what to remove and why. `stagehand gc
// --dry-run` prints the same plan that the daemon applies. When unsure whether a job runs, keep.
#pragma once

#include "stagehand/tmpdir/job_dir.hpp"

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace stagehand::gc {

struct BaseEntry
{
  std::string name;
  bool is_dir = false;
  uid_t uid = 0;
  std::int64_t mtime = 0; // seconds
  std::uint64_t ino = 0;
};

using KeepMarker = tmpdir::KeepMarker;

struct Snapshot
{
  std::vector<BaseEntry> entries;             // everything in the base directory but mount points
  std::map<std::uint32_t, KeepMarker> markers; // parsed .keep.job_<id> files
  std::int64_t now = 0;
  std::vector<std::string> mount_points;      // entries something is mounted on: never entered
  // Results of stage-outs that could not complete: directory name -> until when they stay.
  std::map<std::string, std::int64_t> kept_until;
};

struct Evidence
{
  std::set<std::uint32_t> live_steps;                 // jobs with a slurmstepd on this host
  std::optional<std::set<std::uint32_t>> running_here; // from slurmctld; nullopt: it did not answer
  std::set<std::uint32_t> registered_running;          // the daemon's registry
};

enum class Reason { trash, expired, orphan, stale_marker, leftover };
const char* reason_name(Reason r);  // a phrase for people
const char* reason_label(Reason r); // a metric label: trash, expired, orphan, stale_marker, leftover

struct Action
{
  std::string name; // entry of the base directory to remove
  Reason reason;
  std::uint32_t job_id = 0; // for job directories
  std::uint64_t ino = 0;    // the instance decided on (re-checked before removal)
};

enum class JobDirState { running, kept, orphan, unsure };

struct Plan
{
  std::vector<Action> remove;
  std::vector<std::string> mount_points;     // left in place, reported
  std::map<std::uint32_t, JobDirState> jobs; // every job directory seen, and what it is
};

struct Options
{
  std::int64_t grace_seconds = 30; // entries younger than this are never orphans or leftovers
};

// The job id of "job_<id>", if `name` is one.
std::optional<std::uint32_t> job_of_dir(const std::string& name);
// The job id of ".keep.job_<id>", if `name` is a keep marker.
std::optional<std::uint32_t> job_of_marker(const std::string& name);

Plan make_plan(const Snapshot& snapshot, const Evidence& evidence, const Options& options = {});

// Whether a decision on the job directories needs slurmctld's answer: some directory's job has no
// live step on this host and no keep marker of this very directory (which proves it ended).
bool needs_slurmctld(const Snapshot& snapshot, const Evidence& evidence);

} // namespace stagehand::gc
