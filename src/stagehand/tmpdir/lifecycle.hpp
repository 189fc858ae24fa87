// What happens to a job's scratch directory at job start, step start and job end, shared by the
// SPANK plugin and the `stagehand prolog/epilog` commands.
#pragma once

#include "stagehand/config/config.hpp"
#include "stagehand/tmpdir/job_dir.hpp"
#include "stagehand/tmpdir/option.hpp"

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

// The environment variable in which slurmd hands the job's --tmpdir value to the prolog and
// epilog ("(null)" when given without a value).
inline constexpr const char* k_job_script_option_env = "SPANK__SLURM_SPANK_OPTION_stagehand_tmpdir";

// The effective request: the option when given, else [tmpdir] default.
Request effective_request(const Config& config, std::optional<Request> option);

// Job start on a node (as root): makes a fresh directory for the job, replacing anything stale at
// its name, and removes kept directories whose time is up. The directory is made for every job,
// so that any step may ask for it with `srun --tmpdir`; only jobs that ask see SLURM_TMPDIR.
// Returns a sentence for the log.
Result<std::string> on_job_start(const Config& config, const JobContext& job);

// Job end on a node (as root): removes the directory, or marks it kept for keep_for.
Result<std::string> on_job_end(const Config& config, const JobContext& job, Request request);

} // namespace stagehand::tmpdir
