// Job start and end on a node, as the plugin's prolog/epilog and `stagehand prolog/epilog` run
// them (as root): the directory is made or moved to the trash in O(1), and the daemon, when one
// answers within a short deadline, is told; without it, the epilog removes the trash within a time
// budget and leaves the rest for later. Never waits long, never fails the caller over the daemon.
#pragma once

#include "stagehand/config/config.hpp"
#include "stagehand/job/stage_out.hpp"
#include "stagehand/stage/kinds.hpp"
#include "stagehand/tmpdir/lifecycle.hpp"

#include <chrono>
#include <optional>
#include <string>

namespace stagehand::job {

inline constexpr std::chrono::milliseconds k_hook_daemon_deadline{1000};
inline constexpr std::chrono::milliseconds k_epilog_removal_budget{3000};

// Returns the sentence for the log; an error only when the directory could not be made/moved.
// `staging`: whether the job was submitted with --stage-data, as the daemon is told.
Result<std::string> job_start(const Config& config, const tmpdir::JobContext& job, stage::StagingAsked staging);
// Without a daemon, the trash is removed for at most `budget`; the rest stays for GC.
// With `out`, the job's --stage-out entries are copied first (as the job user, for at most
// [stage] out_budget), while the directory is still in place.
Result<std::string> job_end(const Config& config, const tmpdir::JobContext& job, tmpdir::Request request,
                            std::chrono::milliseconds budget = k_epilog_removal_budget,
                            const std::optional<StageOutJob>& out = std::nullopt);

} // namespace stagehand::job
