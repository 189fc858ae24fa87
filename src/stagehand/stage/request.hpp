// What the plugin asks of `stagehand stage-run` on a node, as a value and as the helper's
// arguments (one mapping, both directions), and the files in $SLURM_TMPDIR/.stagehand that
// record the outcome: the plugin and the helper both use this header and nothing else.
#pragma once

#include "stagehand/config/config.hpp"
#include "stagehand/util/result.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace stagehand::stage {

inline constexpr const char* k_state_dir = ".stagehand"; // in SLURM_TMPDIR; reserved for destinations
inline constexpr const char* k_lock_name = "lock";       // tasks of the job on the node serialise on it

// The marker that says these specs were staged on this node ("done-<hash>"): a step that adds its
// own --stage-data stages once too, a step that inherits the job's does not.
std::string done_marker(std::string_view specs);

// The marker that holds the one-line reason these specs failed on this node ("failed-<hash>"), so
// the job's other tasks report it instead of trying again.
std::string failed_marker(std::string_view specs);

// The lock a node that staged these specs before takes to do what it owes a later step (reach.hpp):
// not the job's lock, which another step's staging of other sources may hold for long.
std::string settle_lock_name(std::string_view specs);

// Read-once fan-out (Slurm's sbcast): the names a broadcast of these specs has in SLURM_TMPDIR on
// every node (the same path everywhere; the reserved ".stagehand" prefix): the delivered copy of
// the specs' Nth file source, and the markers the reader broadcasts after it ("done" once every
// node holds every copy, "failed" when it gave up).
std::string bcast_copy_name(std::string_view specs, std::size_t index);
std::string bcast_done_name(std::string_view specs);
std::string bcast_failed_name(std::string_view specs);
// A reader that staged these specs in an earlier step, telling a wider step that it sends nothing
// (reach.hpp): its nodes read the sources themselves at once.
std::string bcast_none_name(std::string_view specs);
// Every name above for specs of `sources` sources: what a broadcast can leave in SLURM_TMPDIR.
std::vector<std::string> bcast_names(std::string_view specs, std::size_t sources);

// A node's part in a broadcast. none: read every source here (one-node job, [stage] broadcast =
// "never", or a per-node tmpdir layout). reader: read each file source once and broadcast it to
// the job's nodes (scope: the job) or the step's (scope: JOB.STEP), then unpack the delivered
// copy. receiver: wait for the step's reader's delivery (with a deadline), else read here.
// delivered: use an earlier delivery (the batch step's) if there is one, else read here.
enum class BcastRole { none, reader, receiver, delivered };

inline constexpr const char* k_stage_run_command = "stage-run";
inline constexpr const char* k_stage_run_usage =
  "usage: stagehand stage-run --tmpdir DIR --node NAME [--job ID] [--socket PATH] [--progress-interval SECONDS] "
  "[--daemon-silent REASON] [--base DIR] [--max-bytes SIZE] [--allowed-root DIR]... "
  "[--bcast reader:JOB[.STEP]|receiver|delivered [--bcast-nodes HOSTLIST]] [--] SPECS";

struct StageRequest
{
  std::string tmpdir;                     // the job's SLURM_TMPDIR on this node
  std::string node;                       // this node's name, for messages
  std::string base;                       // resolves relative sources; empty: the helper's cwd
  std::uint64_t max_bytes = StageConfig{}.max_bytes;
  std::vector<std::string> allowed_roots; // [stage] allowed_roots
  std::string specs;                      // canonical specs (or the raw option value)
  std::uint32_t job_id = 0;               // with `socket`: stage through the node daemon's cache
  std::string socket;                     // [daemon] socket, %n expanded; empty: no daemon
  std::string daemon_silent;              // with `socket`: the daemon did not answer at task start
                                          // (why): staged without it, not asked again
  std::uint32_t progress_interval = 30;   // seconds between progress lines; 0: none
  BcastRole bcast = BcastRole::none;
  std::string bcast_scope;                // reader: sbcast's --jobid ("42" or "42.0")
  std::string bcast_nodes;                // the nodes of that scope (the job's for the batch step,
                                          // else the step's), a Slurm host list: see reach.hpp
  std::vector<std::string> views;         // destinations root showed as cache views: not staged
  bool operator==(const StageRequest&) const = default;
};

// The helper's arguments after the command name (SPECS last, after "--").
std::vector<std::string> request_args(const StageRequest& request);

// Parses what request_args wrote (a missing "--" before SPECS is accepted). Errors are one line,
// without the usage.
Result<StageRequest> parse_request_args(const std::vector<std::string>& args);

// The helper's soft limit on open files: its walks need few descriptors whatever the dataset, and
// it must not depend on the limit slurmstepd happens to run with.
inline constexpr unsigned long k_helper_open_files = 1024;

// Sets the resource limits that matter for the staging helper, in the forked child before exec
// (async-signal-safe): open files k_helper_open_files (at most the hard limit), and core size 0
// (a crash must not dump the user's data into a core file). Returns 0, or an errno.
int set_helper_limits();

} // namespace stagehand::stage
