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

// The effective request: the option when given, else [tmpdir] default.
Request effective_request(const Config& config, std::optional<Request> option);

// Job start on a node (as root): makes a fresh directory when `request` asks for one, replacing
// anything stale at its name; also removes kept directories whose time is up. Returns a sentence
// for the log.
Result<std::string> on_job_start(const Config& config, const JobContext& job, Request request);

// Step start on a node (as root): makes the directory if the job does not have it yet, reuses it
// if it does; refuses an entry that is not the job's own directory.
Result<std::string> on_step_start(const Config& config, const JobContext& job);

// Job end on a node (as root): removes the directory, or marks it kept for keep_for.
Result<std::string> on_job_end(const Config& config, const JobContext& job, Request request);

} // namespace stagehand::tmpdir
