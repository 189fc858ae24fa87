// --stage-out at job end on a node (as root: the epilog, or the daemon after the job): the job's
// directory is opened under the trusted base, and the copy runs in a child with the job user's
// uid, gid and groups (never root), stopped at a time budget. Its lines go to DEST's log (the
// child writes them) and come back for the slurmd or daemon log.
#pragma once

#include "stagehand/config/config.hpp"
#include "stagehand/tmpdir/lifecycle.hpp"

#include <chrono>
#include <string>

namespace stagehand::job {

struct StageOutJob
{
  std::string specs;        // stageout::canonical_option (absolute DESTs, %j/%n kept)
  std::string fallback_dir; // where the log goes when DEST cannot take it (the submit directory)
};

enum class CopyOutcome { complete, failed };
// Whether the copying process ended, or outlived SIGKILL blocked on a filesystem that does not
// answer (then nothing more is written there: the job's log line is skipped).
enum class Copier { ended, stuck };

struct StageOutResult
{
  std::string said; // "stage-out: ..." for the log, one part per entry
  CopyOutcome outcome = CopyOutcome::failed;
  Copier copier = Copier::ended;
  // What happened, without the "stage-out: " prefix (the reason in a record of kept results).
  std::string reason() const { return said.starts_with("stage-out: ") ? said.substr(11) : said; }
};

// Copies the job's --stage-out entries from `dir_name` (job_<id>, or the daemon's
// ".stageout.job_<id>.*") under the node's base; entries without %n only where the directory holds
// the first-node marker the job's task left. Never throws, never fails the caller.
StageOutResult stage_out(const Config& config, const tmpdir::JobContext& job, const StageOutJob& out,
                         const std::string& dir_name, std::chrono::milliseconds budget);

// A stage-out that could not complete keeps its results: `dir_name` stays under a record
// (stageout/kept.hpp) until keep_for is up. One line says where they are and why: returned (for the
// daemon's or slurmd's log) and appended, as the job user, to the log of each of the node's entries
// (DEST's, else the submit directory's).
// With Copier::stuck the line goes to the caller's log only: DEST's filesystem did not answer, and
// the epilog must return within its budget.
std::string keep_results(const Config& config, const tmpdir::JobContext& job, const StageOutJob& out,
                         const std::string& dir_name, const std::string& reason, Copier copier = Copier::ended);

// `stagehand stage-out retry JOBID`: copies the results kept for `job_id` on this node again, as
// their user, for at most `budget`; when complete, the directory goes (a --tmpdir=keep directory
// stays for its keep_for) and so does the record. `requester` is the uid asking: root or the job's
// user. The lines for the caller; an error (refused: not theirs or none; io: not complete).
Result<std::string> retry_kept(const Config& config, const std::string& node, std::uint32_t job_id, uid_t requester,
                               std::chrono::milliseconds budget);

// The same by the results' own user without the daemon, in the calling process (already that
// user: nothing privileged). The results stay on the node until their keep_for: removing them
// needs root.
Result<std::string> retry_kept_as_self(const Config& config, const std::string& node, std::uint32_t job_id,
                                       std::chrono::milliseconds budget);

} // namespace stagehand::job
