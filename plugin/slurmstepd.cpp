// slurmstepd (remote context): read the config as root once per step, then in each task find the
// job's directory (made by the prolog) and export it. Errors fail the task from task_init, which
// fails the job without draining the node.
#include "plugin.hpp"

#include "stagehand/ddp/step_layout.hpp"
#include "stagehand/tmpdir/lifecycle.hpp"
#include "stagehand/util/escape.hpp"

#include <unistd.h>

namespace stagehand::plugin {

namespace {

struct StepState
{
  std::optional<Config> config;
  std::string config_error;
  Args args;
};

StepState& step_state()
{
  static StepState s;
  return s;
}

} // namespace

std::optional<std::string> task_env(spank_t sp, const std::string& name)
{
  std::string buf(4096, '\0');
  for (int attempt = 0; attempt < 4; ++attempt) {
    spank_err_t rc = spank_getenv(sp, name.c_str(), buf.data(), static_cast<int>(buf.size()));
    if (rc == ESPANK_SUCCESS) {
      return std::string(buf.c_str());
    }
    if (rc != ESPANK_NOSPACE) {
      return std::nullopt;
    }
    buf.resize(buf.size() * 16); // node lists and stage specs of large jobs
  }
  return std::nullopt;
}

int stepd_init_post_opt(spank_t sp, int ac, char** av)
{
  StepState& s = step_state();
  std::uint32_t step_id = 0;
  if (spank_get_item(sp, S_JOB_STEPID, &step_id) == ESPANK_SUCCESS && step_id == ddp::k_batch_step_id) {
    recover_options_from_env([sp](const std::string& name) { return task_env(sp, name); });
  }
  auto args = parse_args(ac, av);
  auto config = args ? load_config(args->config_path, OwnerCheck::require_root_owned) : Result<Config>(args.error());
  if (!config) {
    slurm_error("stagehand: %s", escape_control(config.error().message).c_str());
    s.config_error = config.error().message;
    return 0; // only jobs that use stagehand fail, in task_init
  }
  s.config = std::move(*config);
  s.args = *args;
  return 0;
}

namespace {

// Exports SLURM_TMPDIR (and TMPDIR); `path` and `node` receive the directory and the node name.
int export_tmpdir(spank_t sp, const Config& config, std::string& path, std::string& node_name)
{
  if (tmpdir::effective_request(config, options().tmpdir) == tmpdir::Request::none) {
    return 0;
  }
  // slurmstepd sets SLURMD_NODENAME from its own config just before task_init; earlier in the
  // step the job environment holds whatever the user's environment held.
  auto node_env = task_env(sp, "SLURMD_NODENAME");
  std::uint32_t job_id = 0;
  if (!node_env || spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS) {
    slurm_error("stagehand: --tmpdir: cannot tell this node's name or the job id");
    return -1;
  }
  const std::string node = *node_env;

  auto base = tmpdir::base_path(config, node);
  auto dir = base ? tmpdir::find_job_dir(*base, job_id, ::getuid()) : Result<std::string>(base.error());
  if (!dir) {
    if (auto hidden = base_hidden_by_job_namespace(config, task_env(sp, "SLURM_CONF"))) {
      slurm_error("stagehand: --tmpdir: no scratch directory on node %s: %s", node.c_str(), hidden->c_str());
      return -1;
    }
    slurm_error("stagehand: --tmpdir: no scratch directory on node %s: %s (the node's prolog did not make it; "
                "see the slurmd log)",
                node.c_str(), escape_control(dir.error().message).c_str());
    return -1;
  }
  if (spank_setenv(sp, "SLURM_TMPDIR", dir->c_str(), 1) != ESPANK_SUCCESS ||
      (config.tmpdir.export_tmpdir && spank_setenv(sp, "TMPDIR", dir->c_str(), 1) != ESPANK_SUCCESS)) {
    slurm_error("stagehand: --tmpdir: cannot set SLURM_TMPDIR");
    return -1;
  }
  path = *dir;
  node_name = node;
  return 0;
}

} // namespace

int stepd_privileged(spank_t sp, int /*ac*/, char** /*av*/)
{
  const StepState& s = step_state();
  return stepd_task_init_privileged(sp, s.config ? &*s.config : nullptr);
}

int stepd_task_init(spank_t sp, int /*ac*/, char** /*av*/)
{
  StepState& s = step_state();
  if (!s.config) {
    if (options().tmpdir || options().ddp_env || options().stage_data || options().stage_out) {
      slurm_error("stagehand: the node's stagehand config is unusable (%s); ask your cluster admin",
                  s.config_error.c_str());
      return -1;
    }
    return 0;
  }
  std::string tmpdir_path, node;
  if (export_tmpdir(sp, *s.config, tmpdir_path, node) != 0) {
    return -1;
  }
  if (options().stage_out && mark_stage_out_node(sp, tmpdir_path, node) != 0) {
    return -1;
  }
  if (options().stage_data && stage_data(sp, *s.config, s.args, tmpdir_path, node) != 0) {
    return -1;
  }
  // Without --ddp-env, only a task started from a task with stagehand's DDP values (an srun
  // inside `srun --ddp-env bash`) has anything to do: those values belong to the enclosing step.
  if ((options().ddp_env || has_ddp_marker(sp)) && export_ddp_env(sp, *s.config, options().ddp_env) != 0) {
    return -1;
  }
  return 0;
}

} // namespace stagehand::plugin
