// task_init: the task's PyTorch distributed environment, from slurmstepd's own view of the step.
#include "plugin.hpp"

#include "stagehand/ddp/hostlist.hpp"

#include <algorithm>
#include <cstdlib>

namespace stagehand::plugin {

namespace {

std::uint32_t gpus_on_node(spank_t sp)
{
  if (auto g = task_env(sp, "SLURM_GPUS_ON_NODE")) {
    return static_cast<std::uint32_t>(std::strtoul(g->c_str(), nullptr, 10));
  }
  if (auto cvd = task_env(sp, "CUDA_VISIBLE_DEVICES"); cvd && !cvd->empty()) {
    return static_cast<std::uint32_t>(std::count(cvd->begin(), cvd->end(), ',') + 1);
  }
  return 0;
}

Result<ddp::StepLayout> step_layout(spank_t sp)
{
  ddp::StepLayout s;
  bool ok = spank_get_item(sp, S_JOB_ID, &s.job_id) == ESPANK_SUCCESS &&
            spank_get_item(sp, S_JOB_STEPID, &s.step_id) == ESPANK_SUCCESS;
  if (!ok) {
    return Error::invalid("cannot read the job and step ids");
  }
  if (spank_get_item(sp, S_SLURM_RESTART_COUNT, &s.restart_count) != ESPANK_SUCCESS) {
    s.restart_count = 0;
  }
  // slurmstepd sets these in the task's environment right before task_init.
  if (s.batch_step()) {
    auto nodes = task_env(sp, "SLURM_JOB_NODELIST");
    if (!nodes) {
      return Error::invalid("SLURM_JOB_NODELIST is not set");
    }
    auto hosts = ddp::expand_hostlist(*nodes);
    if (!hosts) {
      return hosts.error();
    }
    s.node_list = *nodes;
    s.nnodes = static_cast<std::uint32_t>(hosts->size());
    return s;
  }
  auto nodes = task_env(sp, "SLURM_STEP_NODELIST");
  if (!nodes) {
    return Error::invalid("SLURM_STEP_NODELIST is not set");
  }
  s.node_list = *nodes;
  int local_id = 0;
  ok = spank_get_item(sp, S_JOB_NNODES, &s.nnodes) == ESPANK_SUCCESS &&
       spank_get_item(sp, S_JOB_NODEID, &s.node_id) == ESPANK_SUCCESS &&
       spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &s.ntasks) == ESPANK_SUCCESS &&
       spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &s.local_ntasks) == ESPANK_SUCCESS &&
       spank_get_item(sp, S_TASK_GLOBAL_ID, &s.global_task_id) == ESPANK_SUCCESS &&
       spank_get_item(sp, S_TASK_ID, &local_id) == ESPANK_SUCCESS;
  if (!ok) {
    return Error::invalid("cannot read the step's task layout");
  }
  s.local_task_id = static_cast<std::uint32_t>(local_id);
  s.gpus_on_node = gpus_on_node(sp);
  return s;
}

} // namespace

int export_ddp_env(spank_t sp, const Config& config, ddp::Mode mode)
{
  auto layout = step_layout(sp);
  if (!layout) {
    slurm_error("stagehand: --ddp-env: %s", layout.error().message.c_str());
    return -1;
  }
  if (layout->step_id == ddp::k_extern_step_id) {
    return 0;
  }
  auto wanted = ddp::compute_environment(config.ddp, *layout, mode);
  if (!wanted) {
    slurm_error("stagehand: --ddp-env: %s", wanted.error().message.c_str());
    return -1;
  }
  auto plan = ddp::plan_exports(*wanted, [&](const std::string& name) { return task_env(sp, name); });
  for (const auto& var : plan.set) {
    if (spank_setenv(sp, var.name.c_str(), var.value.c_str(), 1) != ESPANK_SUCCESS) {
      slurm_error("stagehand: --ddp-env: cannot set %s", var.name.c_str());
      return -1;
    }
  }
  if (spank_setenv(sp, ddp::k_marker_env, plan.marker.c_str(), 1) != ESPANK_SUCCESS) {
    slurm_error("stagehand: --ddp-env: cannot set %s", ddp::k_marker_env);
    return -1;
  }
  return 0;
}

} // namespace stagehand::plugin
