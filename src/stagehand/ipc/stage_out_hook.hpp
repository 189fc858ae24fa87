// --stage-out at job end on a node (as root, in the epilog): the job's scratch directory is opened
// under the trusted base, and the copy runs in a child with the job user's uid, gid and groups
// (never root), stopped at a time budget. Its lines go to DEST's log (the child writes them) and
// come back for the slurmd log.
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

// Copies the job's --stage-out entries (those without %n only where the job's directory holds
// the first-node marker the job's task left) from its directory on this node; a sentence for the slurmd
// log (one part per entry). Never fails the caller.
std::string stage_out(const Config& config, const tmpdir::JobContext& job, const StageOutJob& out,
                      std::chrono::milliseconds budget);

} // namespace stagehand::ipc
