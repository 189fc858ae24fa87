// The impure half of garbage collection: reading the base directory and the evidence of running
// jobs, and applying a plan (rename aside, re-check the instance, remove fd-based).
#pragma once

#include "stagehand/config/config.hpp"
#include "stagehand/gc/plan.hpp"
#include "stagehand/util/result.hpp"

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace stagehand::gc {

// Lists the base directory (each entry opened O_PATH without crossing a mount, then fstat: a
// mount point is listed as one, never asked anything) and parses its keep markers.
Result<Snapshot> snapshot_base(int base_fd, std::int64_t now);

// Jobs with a slurmstepd process on this host ("slurmstepd: [<job>.<step>]" in /proc/*/cmdline).
// Only root's processes named slurmstepd are read: reading a user process's cmdline can block on
// its memory map (a page fault stuck in the user's FUSE filesystem).
std::set<std::uint32_t> live_step_jobs(const std::string& proc_root = "/proc");

// Parses squeue's "%A" lines (one job id per line).
std::set<std::uint32_t> parse_squeue_ids(const std::string& text);

// Jobs slurmctld says are running (or completing, suspended...) on `node`; nullopt when squeue
// cannot answer within the deadline. `squeue` is the program to run (PATH lookup without '/').
std::optional<std::set<std::uint32_t>> slurmctld_running(const std::string& node, const std::string& squeue,
                                                          std::chrono::milliseconds deadline);

// The plan's options from the configuration: keep_for, and how long a ".stageout." directory must
// stay unchanged to be a stray (twice [stage] out_budget, the longest an epilog copies, plus 30 min).
Options options_from(const Config& config);

// The pending stage-outs of `node`'s daemon, from its state file under `config`'s state_dir
// (`%n` expanded as the daemon does; none when there is no such directory yet); nullopt when it
// cannot be read (then no stage-out counts as a stray).
std::optional<std::set<std::string>> pending_stage_outs(const Config& config, std::string_view node);

struct Failure
{
  std::string name;    // the entry of the base directory
  std::string message; // what stays and why
};

struct Applied
{
  std::vector<Action> done;
  std::vector<Failure> failures; // entries (or parts of them) left in place, with the reason
  std::vector<std::string> detached; // mounts a user left, detached (mount points relative to the base)
  std::vector<std::string> recorded; // stray stage-outs now kept under a record (Plan::strays)
  std::uint64_t entries_removed = 0;
  std::vector<std::string> views_removed; // `.views/job_<id>` of jobs whose directory is gone
  bool out_of_time = false;      // the deadline came first: the rest waits for the next pass
};

// Carries out `plan` in the base directory, stopping at `deadline` (what is left stays in the trash
// for the next pass). A job directory is first renamed into the trash, and put back if what was
// renamed is not the instance the plan decided on (a requeued job's fresh directory); a removal
// that fails halfway leaves the rest in the trash. What is collected is first taken from its user
// (tmpdir::take_from_user), and every mount left on it or below it is detached (fs/mounts.hpp:
// through an fd, never the base or above); the removal itself never crosses a mount. Mount points
// not decided on are reported, never entered. Stray stage-outs get their record.
Applied apply(int base_fd, const Plan& plan, std::chrono::steady_clock::time_point deadline);

// GC runs every gc_interval and meets a trash entry it cannot remove (a mount inside) every time:
// this says each failing entry once, until it stops failing.
class ReportOnce
{
public:
  // The failures of this pass not reported at an earlier one. After a complete pass (not cut short
  // by its deadline), entries that no longer fail are forgotten.
  std::vector<Failure> fresh(const Applied& applied);

private:
  std::set<std::string> m_said;
};

} // namespace stagehand::gc
