// task_init: running the staging helper (`stagehand stage-run`) as the task's user, in one
// place: its arguments, fork and exec, and one line for every way it can end badly.
#include "plugin.hpp"

#include "stagehand/util/subprocess.hpp"

#include <string>
#include <vector>

namespace stagehand::plugin {

int run_stage_helper(const std::string& helper_path, const stage::StageRequest& request,
                     const std::vector<std::string>& env)
{
  proc::Program helper;
  helper.argv = {helper_path, stage::k_stage_run_command};
  for (auto& a : stage::request_args(request)) {
    helper.argv.push_back(std::move(a));
  }
  helper.env = env;
  helper.out = proc::Output::inherit;
  helper.err = proc::Output::inherit;
  helper.before_exec = [] { (void)stage::set_helper_limits(); }; // its own limits, not slurmstepd's
  const char* node = request.node.c_str();
  // Unbounded on purpose: staging takes as long as its data does. This wait is in the task (the
  // user's process, forked by slurmstepd), not in slurmstepd; the job's end kills it and the helper
  // (same step, same cgroup), so it never holds slurmstepd.
  auto ended = proc::run(helper, std::nullopt);
  if (!ended) {
    slurm_error("stagehand: --stage-data: %s on node %s", ended.error().message.c_str(), node);
    return -1;
  }
  switch (ended->exit_code().value_or(-1)) {
  case 0:
    return 0;
  case 1:
    return -1; // the helper printed the reason
  case 127:
    slurm_error("stagehand: --stage-data: cannot run %s on node %s (ask your cluster admin)", helper_path.c_str(), node);
    return -1;
  default: // "failed with exit status 3", "was killed by signal 9 (SIGKILL)"
    slurm_error("stagehand: --stage-data: the staging helper %s %s on node %s",
                ended->exit_code() ? "failed with" : "was", ended->describe().c_str(), node);
    return -1;
  }
}

} // namespace stagehand::plugin
