// task_init: --stage-data on this node. The task is already the job user (uid, gid, groups), so
// the helper it runs reads sources with the user's credentials only. The helper, not the plugin,
// links libarchive: srun and slurmstepd load nothing more at each step. A staging whose every
// source root showed as a cache view (task_init_privileged) has nothing left to stage: its summary
// lines are written here, and no helper is started (its exec would be most of a hit's cost).
#include "plugin.hpp"

#include "stagehand/fs/atomic_file.hpp"
#include "stagehand/fs/io.hpp"
#include "stagehand/stage/reach.hpp"
#include "stagehand/stage/state_dir.hpp"
#include "stagehand/tmpdir/views.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace stagehand::plugin {

namespace {

// The staging of `request` when every source is a view, done as the helper would (under the job
// directory's lock, once per node: the done marker); nullopt when the helper must run.
std::optional<int> shown_as_views(const stage::StageRequest& request)
{
  if (request.views.empty() || request.bcast != stage::BcastRole::none) {
    return std::nullopt; // a broadcast's reader tells the other nodes, even with nothing to read
  }
  std::vector<tmpdir::View> views;
  for (const auto& line : request.views) {
    if (auto v = tmpdir::parse_view_line(line)) {
      views.push_back(*v);
    }
  }
  auto lines = tmpdir::views_only_summaries(request.specs, views, request.tmpdir);
  if (!lines) {
    return std::nullopt;
  }
  auto dir = stage::lock_state_dir(request.tmpdir);
  if (!dir || stage::has_marker(dir->state.get(), stage::failed_marker(request.specs))) {
    return std::nullopt; // the helper says why
  }
  const std::string done = stage::done_marker(request.specs);
  if (stage::has_marker(dir->state.get(), done)) {
    return 0; // another task of the job wrote the lines
  }
  std::string text;
  for (const auto& l : *lines) {
    text += "stagehand: " + request.node + ": " + l + "\n";
  }
  (void)fs::write_all(STDOUT_FILENO, text, "the job's output");
  stage::write_marker(dir->state.get(), done, "");
  return 0;
}

} // namespace

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
  // Staged already on this node (an earlier task or step with the same specs): nothing to start,
  // unless a later broadcast left something here or this step's other nodes must be told (the
  // helper does both, and stages nothing).
  const std::string done = tmpdir + "/" + stage::k_state_dir + "/" + stage::done_marker(request.specs);
  if (auto marker = fs::read_small_file(AT_FDCWD, done, 1024 * 1024); marker || marker.error().code != ENOENT) {
    broadcast_role(sp, config, request);
    if (!stage::owes_step(request, marker ? *marker : "")) {
      return 0;
    }
    return run_stage_helper(args.helper_path, request, broadcast_env(sp, request));
  }
  request.views = task_views();
  if (!request.socket.empty()) {
    request.daemon_silent = task_daemon_silence();
  }
  broadcast_role(sp, config, request);
  if (auto rc = shown_as_views(request)) {
    return *rc;
  }
  return run_stage_helper(args.helper_path, request, broadcast_env(sp, request));
}

} // namespace stagehand::plugin
