// task_init: --stage-data on this node. The task is already the job user (uid, gid, groups), so
// the helper it runs reads sources with the user's credentials only. The helper, not the plugin,
// links libarchive: srun and slurmstepd load nothing more at each step.
#include "plugin.hpp"

#include <unistd.h>

namespace stagehand::plugin {

int stage_data(spank_t sp, const Config& config, const Args& args, const std::string& tmpdir, const std::string& node)
{
  if (tmpdir.empty()) {
    slurm_error("stagehand: --stage-data: no SLURM_TMPDIR on node %s", node.c_str());
    return -1;
  }
  stage::StageRequest request;
  request.tmpdir = tmpdir;
  request.node = node;
  request.base = task_env(sp, "SLURM_SUBMIT_DIR").value_or("");
  request.max_bytes = config.stage.max_bytes;
  request.allowed_roots = config.stage.allowed_roots;
  request.progress_interval = static_cast<std::uint32_t>(config.stage.progress_interval.count());
  request.socket = expand_node(config.daemon.socket, node);
  if (spank_get_item(sp, S_JOB_ID, &request.job_id) != ESPANK_SUCCESS) {
    request.socket.clear(); // without the job id the daemon cannot help: stage in the task
  }
  // Canonical sources from sbatch/srun's check; else the raw value, relative to the submit dir.
  request.specs = task_env(sp, k_stage_env).value_or(*options().stage_data);
  // Staged already on this node (an earlier task or step with the same specs): nothing to start.
  const std::string done = tmpdir + "/" + stage::k_state_dir + "/" + stage::done_marker(request.specs);
  if (::access(done.c_str(), F_OK) == 0) {
    return 0;
  }
  request.views = task_views();
  broadcast_role(sp, config, request);
  return run_stage_helper(args.helper_path, request, broadcast_env(sp, request));
}

} // namespace stagehand::plugin
