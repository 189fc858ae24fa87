// Shared declarations of the SPANK glue: plugin-wide state and the per-context entry points.
#pragma once

#include "stagehand/config/config.hpp"
#include "stagehand/ddp/env.hpp"
#include "stagehand/job/job_env.hpp"
#include "stagehand/stage/request.hpp"
#include "stagehand/tmpdir/option.hpp"

// spank.h declares the slurm_spank_* callbacks and spank_options outside its own extern "C"
// block; include it inside one so our extern "C" definitions match those declarations.
extern "C" {
#include <slurm/spank.h>
}

#include <functional>
#include <optional>
#include <string>

namespace stagehand::plugin {

// Options as seen by this process (set by the option callbacks, in every context but the
// prolog/epilog, which read them from the environment slurmd gives them).
struct Options
{
  std::optional<tmpdir::Request> tmpdir;
  std::optional<ddp::Mode> ddp_env;
  std::optional<std::string> stage_data; // every value given, ','-joined, syntax already checked
  std::optional<std::string> stage_out;  // every value given, ','-joined, syntax already checked
};

Options& options();

// sbatch --export=NONE keeps only the job environment's SLURM* variables: the batch step then
// misses the _SLURM_SPANK_OPTION_* variables that carry sbatch's options to it, but still has
// SLURM_SPANK__SLURM_SPANK_OPTION_stagehand_* (which every srun in the script reads as options).
// Sets each option not given from those (slurmstepd, batch step).
void recover_options_from_env(const std::function<std::optional<std::string>(const std::string&)>& env);

// Where the stagehand CLI is installed, fixed at build time (helper_path.cpp: the packages link
// their own copy of that one file, so a package built in any prefix runs /usr/bin/stagehand).
extern const char* const k_default_helper_path;

// The plugstack.conf arguments: config=PATH, helper=PATH (the stagehand CLI, for staging).
struct Args
{
  std::string config_path{k_default_config_path};
  std::string helper_path{k_default_helper_path};
};
Result<Args> parse_args(int ac, char** av);

// Loads the config named by the plugstack arguments (root-owned file required).
Result<Config> load(int ac, char** av);

// Environment variable carrying the canonical --stage-data specs from sbatch/srun to the steps.
inline constexpr const char* k_stage_env = "STAGEHAND_STAGE_DATA";
// Where Slurm carries --stage-data's value to the remote side (sbatch's environment, and prefixed
// with SLURM_SPANK_ in the job's control environment, which survives --export=NONE).
inline constexpr const char* k_stage_option_env = job::k_stage_option_var;



// Per-context handlers (submit.cpp, slurmstepd.cpp, job_script.cpp).
int submit_init_post_opt(spank_t sp, int ac, char** av);
int stepd_init_post_opt(spank_t sp, int ac, char** av);
int stepd_task_init(spank_t sp, int ac, char** av);
int stepd_privileged(spank_t sp, int ac, char** av);
int job_prolog(spank_t sp, int ac, char** av);
int job_epilog(spank_t sp, int ac, char** av);

// job_namespace.cpp: the line saying that Slurm's per-job private directories (namespace/tmpfs)
// hide [tmpdir] base from the jobs, or nothing. `slurm_conf`: the path of slurm.conf where the
// caller knows it (a task's SLURM_CONF); otherwise slurmd's -f, SLURM_CONF, /etc/slurm/slurm.conf.
std::optional<std::string> base_hidden_by_job_namespace(const Config& config, std::optional<std::string> slurm_conf);

// task_init_privileged (cache_views.cpp, root): shows this job's cache hits on this node as its
// user's own files (once per node per job); never fails the task. task_views(): the destinations
// shown so, for this task's staging helper; task_daemon_silence(): why the node daemon is not to be
// asked again (it did not answer then), or empty.
int stepd_task_init_privileged(spank_t sp, const Config* config);
const std::vector<std::string>& task_views();
const std::string& task_daemon_silence();

// A variable of the task's environment, in slurmstepd (any length).
std::optional<std::string> task_env(spank_t sp, const std::string& name);

// task_init helpers (ddp_env.cpp): whether the task's environment holds stagehand's DDP values
// from an enclosing step; exports the DDP environment of this task (`requested`: the step's own
// --ddp-env, nullopt when it did not ask) and replaces or removes an enclosing step's values.
bool has_ddp_marker(spank_t sp);
int export_ddp_env(spank_t sp, const Config& config, std::optional<ddp::Mode> requested);

// task_init helper (stage_data.cpp): stages the job's data into `tmpdir` on this node, once.
int stage_data(spank_t sp, const Config& config, const Args& args, const std::string& tmpdir, const std::string& node);

// task_init helper (stage_out.cpp): marks the job's first node in `tmpdir` for the epilog.
int mark_stage_out_node(spank_t sp, const std::string& tmpdir, const std::string& node);
// broadcast.cpp: sets request.bcast (and bcast_scope, bcast_nodes) to this node's part in a read-once
// broadcast; broadcast_env: what the reader's helper needs to run sbcast (the task's PATH and
// SLURM_CONF), empty for other parts; log_broadcast_layout: slurmd's one line when the tmpdir
// layout rules broadcasts out.
void broadcast_role(spank_t sp, const Config& config, stage::StageRequest& request);
std::vector<std::string> broadcast_env(spank_t sp, const stage::StageRequest& request);
void log_broadcast_layout(const Config& config);

// helper_exec.cpp: runs `HELPER stage-run` for `request` as the calling task's user (stdin from
// /dev/null, environment `env` only) and waits. 0 when it succeeded; otherwise -1, with one line
// saying why unless the helper printed its own (exit status 1).
int run_stage_helper(const std::string& helper_path, const stage::StageRequest& request,
                     const std::vector<std::string>& env = {});

} // namespace stagehand::plugin
