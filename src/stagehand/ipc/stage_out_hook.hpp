// --stage-out at job end on a node (as root: the epilog, or the daemon after the job): the job's
// directory is opened under the trusted base, and the copy runs in a child with the job user's
// uid, gid and groups (never root), stopped at a time budget. Its lines go to DEST's log (the
// child writes them) and come back for the slurmd or daemon log.
#pragma once

#include "stagehand/config/config.hpp"
#include "stagehand/tmpdir/lifecycle.hpp"

#include <chrono>
#include <string>

namespace stagehand::ipc {

struct StageOutJob
{
  std::string specs;        // stageout::canonical_option (absolute DESTs, %j/%n kept)
  std::string fallback_dir; // where the log goes when DEST cannot take it (the submit directory)
};

enum class CopyOutcome { complete, failed };

struct StageOutResult
{
  std::string said; // "stage-out: ..." for the log, one part per entry
  CopyOutcome outcome = CopyOutcome::failed;
};

// Copies the job's --stage-out entries from `dir_name` (job_<id>, or the daemon's
// ".stageout.job_<id>.*") under the node's base; entries without %n only where the directory holds
// the first-node marker the job's task left. Never throws, never fails the caller.
StageOutResult stage_out(const Config& config, const tmpdir::JobContext& job, const StageOutJob& out,
                         const std::string& dir_name, std::chrono::milliseconds budget);

} // namespace stagehand::ipc
