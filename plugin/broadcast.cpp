// task_init: this node's part in a read-once broadcast of --stage-data's file sources (Slurm's
// sbcast, run by the staging helper as the user), and the one slurmd log line when the tmpdir
// layout rules it out.
#include "plugin.hpp"

#include "stagehand/util/units.hpp"

#include <slurm/slurm.h>

namespace stagehand::plugin {

namespace {

bool per_node_layout(const Config& config) { return config.tmpdir.base.find("%n") != std::string::npos; }

std::uint32_t env_u32(spank_t sp, const char* name)
{
  auto v = task_env(sp, name);
  return v ? parse_u32(*v).value_or(0) : 0;
}

} // namespace

void broadcast_role(spank_t sp, const Config& config, stage::StageRequest& request)
{
  request.bcast = stage::BcastRole::none;
  // One node, "never", or a tmpdir path that differs per node (sbcast writes one path everywhere).
  if (config.stage.broadcast == Broadcast::never || per_node_layout(config) ||
      env_u32(sp, "SLURM_JOB_NUM_NODES") <= 1) {
    return;
  }
  std::uint32_t job_id = 0;
  std::uint32_t step_id = 0;
  std::uint32_t step_nodes = 0;
  std::uint32_t node_id = 0;
  if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_STEPID, &step_id) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_NNODES, &step_nodes) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_NODEID, &node_id) != ESPANK_SUCCESS) {
    return;
  }
  if (step_id == SLURM_BATCH_SCRIPT || step_id == SLURM_INTERACTIVE_STEP) {
    // The job's first staging, on its first node: for every node of the job (PrologFlags=Alloc
    // made their directories); they use the delivery at their first step.
    request.bcast = stage::BcastRole::reader;
    request.bcast_scope = std::to_string(job_id);
    // The batch step's environment may carry a step list from where the job was submitted.
    request.bcast_nodes = task_env(sp, "SLURM_JOB_NODELIST").value_or("");
    return;
  }
  if (step_nodes <= 1) {
    request.bcast = stage::BcastRole::delivered;
  } else if (node_id == 0) {
    request.bcast = stage::BcastRole::reader;
    request.bcast_scope = std::to_string(job_id) + "." + std::to_string(step_id);
  } else {
    request.bcast = stage::BcastRole::receiver;
  }
  // Whom this step's staging reaches: kept on each node, so that a later, wider step's first node
  // knows whether its other nodes wait for a broadcast (reach.hpp).
  request.bcast_nodes = task_env(sp, "SLURM_STEP_NODELIST").value_or("");
}

std::vector<std::string> broadcast_env(spank_t sp, const stage::StageRequest& request)
{
  std::vector<std::string> env;
  if (request.bcast != stage::BcastRole::reader) {
    return env;
  }
  // sbcast runs as the user, as they would run it in their job: their PATH and SLURM_CONF.
  for (const char* name : {"PATH", "SLURM_CONF"}) {
    if (auto v = task_env(sp, name)) {
      env.push_back(std::string(name) + "=" + *v);
    }
  }
  return env;
}

void log_broadcast_layout(const Config& config)
{
  if (config.stage.broadcast == Broadcast::automatic && per_node_layout(config)) {
    slurm_info("stagehand: [stage] broadcast: [tmpdir] base \"%s\" differs per node (%%n), so sbcast cannot "
               "deliver to one path on every node: multi-node jobs read each --stage-data source on every node",
               config.tmpdir.base.c_str());
  }
}

} // namespace stagehand::plugin
