// The per-task --ddp-env decision: which mode applies, the values, what to remove, port check and
// warnings.
#include "stagehand/ddp/task_plan.hpp"

#include "stagehand/util/units.hpp"

#include <algorithm>

namespace stagehand::ddp {

namespace {

std::string plural(std::uint32_t n, const char* one, const char* many)
{
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::string node_name(const StepLayout& step)
{
  return step.host.empty() ? "node index " + std::to_string(step.node_id) : step.host;
}

// A step launched with --resv-ports=0 inherits the SLURM_STEP_RESV_PORTS of the task that ran
// srun: a reserved port that an enclosing step of this job already exported as MASTER_PORT is
// that step's, not this one's.
void drop_inherited_port(StepLayout& step, const EnvLookupFn& current, const std::vector<std::string>& ours)
{
  if (!step.reserved_port || std::find(ours.begin(), ours.end(), "MASTER_PORT") == ours.end()) {
    return;
  }
  if (current("MASTER_PORT") == std::to_string(*step.reserved_port)) {
    step.reserved_port.reset();
  }
}

// The value a variable stagehand computed ends up with in the task: stagehand's, or the user's
// where the user set it; nullopt when this step's mode does not export it.
std::optional<std::uint32_t> effective(const std::string& name, const std::vector<EnvVar>& wanted,
                                       const std::vector<EnvVar>& set, const EnvLookupFn& current)
{
  auto find = [&](const std::vector<EnvVar>& vars) {
    return std::find_if(vars.begin(), vars.end(), [&](const EnvVar& v) { return v.name == name; });
  };
  if (auto it = find(set); it != set.end()) {
    return parse_u32(it->value);
  }
  if (find(wanted) == wanted.end()) {
    return std::nullopt;
  }
  auto value = current(name);
  return value ? parse_u32(*value) : std::nullopt;
}

// Once per node (its first task): tasks that will share GPUs, a torchrun with fewer CPUs than
// workers.
std::vector<std::string> warnings_for(const StepLayout& step, Mode mode, const std::vector<EnvVar>& wanted,
                                      const std::vector<EnvVar>& set, const EnvLookupFn& current)
{
  std::vector<std::string> out;
  if (step.local_task_id != 0) {
    return out;
  }
  const auto lws = effective("LOCAL_WORLD_SIZE", wanted, set, current);
  if (lws && step.visible_gpus > 0 && step.gpus_on_node < *lws) {
    out.push_back("--ddp-env: " + node_name(step) + ": " + plural(*lws, "task", "tasks") + " (LOCAL_WORLD_SIZE) but " +
                  plural(step.gpus_on_node, "GPU", "GPUs") +
                  " (CUDA_VISIBLE_DEVICES): tasks will share a GPU, which NCCL refuses; ask for one GPU per "
                  "task (--gpus-per-task=1) or as many GPUs per node as tasks per node");
  }
  // In auto mode a one-task-per-node step may run anything: only a torchrun starts workers.
  const auto workers = effective("PET_NPROC_PER_NODE", wanted, set, current);
  const bool torchrun = mode == Mode::torchrun || step.runs_torchrun;
  if (workers && torchrun && step.cpus_per_task > 0 && step.cpus_per_task < *workers) {
    out.push_back("--ddp-env: " + node_name(step) + ": torchrun will start " + plural(*workers, "worker", "workers") +
                  " (PET_NPROC_PER_NODE) on " + plural(step.cpus_per_task, "CPU", "CPUs") +
                  "; ask for at least one CPU per worker (srun --cpus-per-task=" + std::to_string(*workers) + ")");
  }
  return out;
}

std::optional<PortCheck> port_check(const StepLayout& step, const std::vector<EnvVar>& set)
{
  if (step.node_id != 0 || step.local_task_id != 0) {
    return std::nullopt;
  }
  for (const auto& v : set) {
    if (v.name != "MASTER_PORT") {
      continue;
    }
    PortCheck check{static_cast<int>(*parse_u32(v.value)), ""};
    check.busy_message = "--ddp-env: MASTER_PORT " + v.value + " is already in use on " + node_name(step) +
                         " (another program holds it)";
    check.busy_message += step.reserved_port
                            ? ", although Slurm reserved it for this step (MpiParams=ports=): ask your admin to keep "
                              "other programs off that range; or set MASTER_PORT yourself"
                            : "; resubmit, or set MASTER_PORT yourself; your admin can give every step ports of its "
                              "own with MpiParams=ports= in slurm.conf";
    return check;
  }
  return std::nullopt;
}

// Rank 0 of a heterogeneous step must run on the node MASTER_ADDR names (het group 0's first):
// a step that leaves that node out or does not start with group 0 is refused there.
Status check_het_rank0(const StepLayout& step)
{
  if (!step.heterogeneous || step.global_task_id != 0 || step.host.empty() || step.host == step.rank0_host) {
    return ok_status();
  }
  return Error::refused("--ddp-env: heterogeneous step: rank 0 runs on " + step.host + ", not on " + step.rank0_host +
                        ", the first node of het group 0, where MASTER_ADDR points; run the step on group 0 "
                        "and all its nodes (srun --het-group=0,...)");
}

// No mode: remove what stagehand exported earlier, and the marker.
TaskPlan remove_only(const std::vector<std::string>& ours)
{
  TaskPlan plan;
  plan.unset = ours;
  plan.unset.emplace_back(k_marker_env);
  return plan;
}

} // namespace

Result<TaskPlan> plan_task(const DdpConfig& config, const StepLookup& lookup, std::optional<Mode> requested)
{
  const EnvLookupFn& current = lookup.env;
  const auto marker = current(k_marker_env);
  if (!requested && !marker) {
    return TaskPlan{};
  }
  const std::vector<std::string> ours = stagehand_values(current);
  auto layout = build_step_layout(lookup);
  if (!layout) {
    if (requested) {
      return layout.error();
    }
    return remove_only(ours); // not asked for: never fail a step over it
  }
  if (layout->step_id == k_extern_step_id) {
    return TaskPlan{};
  }
  std::optional<Mode> mode = requested;
  if (!mode && marker && marker_job_id(*marker) == layout->job_id) {
    mode = Mode::automatic;
  }
  if (!mode) {
    return remove_only(ours);
  }
  drop_inherited_port(*layout, current, ours);
  auto wanted = check_het_rank0(*layout) ? compute_environment(config, *layout, *mode)
                                         : Result<std::vector<EnvVar>>(check_het_rank0(*layout).error());
  if (!wanted) {
    if (requested) {
      return wanted.error();
    }
    return remove_only(ours);
  }
  ExportPlan exports = plan_exports(*wanted, current);
  TaskPlan plan;
  plan.set = std::move(exports.set);
  plan.unset = std::move(exports.unset);
  if (!layout->job_level()) {
    plan.check_port = port_check(*layout, plan.set);
    if (plan.check_port) {
      plan.check_port->fatal = requested.has_value();
    }
    plan.warnings = warnings_for(*layout, *mode, *wanted, plan.set, current);
  }
  plan.set.push_back(EnvVar{k_marker_env, std::to_string(layout->job_id) + ";" + exports.marker});
  return plan;
}

} // namespace stagehand::ddp
