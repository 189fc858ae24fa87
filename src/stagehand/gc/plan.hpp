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

// Something is mounted on the entry itself: never asked anything (it is listed from readdir
// alone: the directory's own inode number, no owner, no times).
enum class Mounted { no, yes };

struct BaseEntry
{
  std::string name;
  bool is_dir = false;
  uid_t uid = 0;
  std::int64_t mtime = 0; // seconds
  std::uint64_t ino = 0;
  std::int64_t ctime = 0; // seconds: a rename or a change of owner moves it
  Mounted mounted = Mounted::no;
};

using KeepMarker = tmpdir::KeepMarker;

struct Snapshot
{
  std::vector<BaseEntry> entries;             // everything in the base directory (mount points as Mounted::yes)
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
  // The daemon's pending stage-outs (directory names, its state file); nullopt: unknown.
  std::optional<std::set<std::string>> pending_stage_outs;
};

enum class Reason { trash, expired, orphan, stale_marker, leftover };
const char* reason_name(Reason r);  // a phrase for people
const char* reason_label(Reason r); // a metric label: trash, expired, orphan, stale_marker, leftover

struct Action
{
  std::string name; // entry of the base directory to remove
  Reason reason;
  std::uint32_t job_id = 0; // for job directories
  std::uint64_t ino = 0;    // the instance decided on (re-checked before removal); a stale marker: the inode it names
  Mounted mounted = Mounted::no; // something is mounted on it: detached first
};

// A ".stageout." directory that nothing will ever copy from or record: no record, not in the
// daemon's pending list, its job ended, older than Options::stray_after_seconds (an epilog killed
// mid-copy, a lost pending entry). It becomes kept results with a record, never deleted unrecorded.
struct Stray
{
  std::string name;
  std::uint32_t job_id = 0;
  uid_t uid = 0;           // its owner when still the user's; 0 when taken away (unknown)
  std::int64_t until = 0;  // the record's: now + Options::keep_for_seconds
};

enum class JobDirState { running, kept, orphan, unsure };

struct Plan
{
  std::vector<Action> remove;
  std::vector<std::string> mount_points;     // mount points left in place (not decided on), reported
  std::vector<Stray> strays;                 // stage-outs to record as kept
  std::map<std::uint32_t, JobDirState> jobs; // every job directory seen, and what it is
};

struct Options
{
  std::int64_t grace_seconds = 30; // entries younger than this are never orphans or leftovers
  // A ".stageout." directory unchanged (mtime and ctime) for this long, and not pending, is a stray.
  // Callers set it from [stage] out_budget plus a margin: an epilog's copy in progress is younger.
  std::int64_t stray_after_seconds = 3600;
  std::int64_t keep_for_seconds = 86400; // [tmpdir] keep_for: how long a stray's record keeps it
};

// The job id of "job_<id>", if `name` is one.
std::optional<std::uint32_t> job_of_dir(const std::string& name);
// The job id of ".keep.job_<id>", if `name` is a keep marker.
std::optional<std::uint32_t> job_of_marker(const std::string& name);

Plan make_plan(const Snapshot& snapshot, const Evidence& evidence, const Options& options = {});

// Whether a decision on the job directories needs slurmctld's answer: some directory's job has no
// live step on this host and no keep marker of this very directory (which proves it ended).
// So does a stray ".stageout." directory (Plan::strays) whose job has no live step here.
bool needs_slurmctld(const Snapshot& snapshot, const Evidence& evidence, const Options& options = {});

} // namespace stagehand::gc
