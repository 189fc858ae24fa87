// What happens to a job's scratch directory at job start, step start and job end, shared by the
// SPANK plugin and the `stagehand prolog/epilog` commands.
#pragma once

#include "stagehand/config/config.hpp"
#include "stagehand/tmpdir/job_dir.hpp"
#include "stagehand/tmpdir/option.hpp"
#include "stagehand/util/fd.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace stagehand::tmpdir {

struct JobContext
{
  JobOwner owner;
  std::string node; // SLURMD_NODENAME, for %n
};

// The base directory for a node ("%n" expanded), after checking the node name.
Result<std::string> base_path(const Config& config, const std::string& node);
// The node's base directory, opened and checked as trusted (never created).
Result<UniqueFd> open_base(const Config& config, const std::string& node);

// The environment variable in which slurmd hands the job's --tmpdir value to the prolog and
// epilog ("(null)" when given without a value).
inline constexpr const char* k_job_script_option_env = "SPANK__SLURM_SPANK_OPTION_stagehand_tmpdir";

// The effective request: the option when given, else [tmpdir] default.
Request effective_request(const Config& config, std::optional<Request> option);

// Job start on a node (as root): makes a fresh directory for the job, replacing anything stale at
// its name. The directory is made for every job, so that any step may ask for it with `srun
// --tmpdir`; only jobs that ask see SLURM_TMPDIR. Other jobs' leftovers are never removed here
// (that is garbage collection's work, off the critical path). Returns a sentence for the log.
Result<std::string> on_job_start(const Config& config, const JobContext& job);

struct JobEnd
{
  std::string summary;              // a sentence for the log
  std::optional<std::string> trash; // the directory's name in the trash, still to be removed
  std::int64_t keep_until = 0;      // when kept
  std::optional<std::string> pending; // EndMove::to_stage_out: the directory's name, still to copy from
};

enum class EndMove { to_trash, to_stage_out };

// Job end on a node (as root): renames the directory into the trash at once (O(1), whatever the
// job left in it), or marks it kept for keep_for. The caller hands the trash to the daemon or
// removes it with remove_trash().
// With EndMove::to_stage_out (and not kept) it is renamed aside for the daemon's copy instead.
Result<JobEnd> on_job_end(const Config& config, const JobContext& job, Request request,
                          EndMove move = EndMove::to_trash);

// Removes a trash entry of the node's base directory, stopping at `budget`: what is left stays in
// the trash for the daemon or `stagehand gc`. Returns a sentence for the log.
std::string remove_trash(const Config& config, const std::string& node, const std::string& trash,
                         std::chrono::milliseconds budget);

} // namespace stagehand::tmpdir
