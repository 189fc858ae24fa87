// The PyTorch distributed environment of one task (or of the batch script), computed from the
// step's own layout: MASTER_ADDR/PORT, WORLD_SIZE, RANK, ..., and torchrun's PET_* variables.
#pragma once

#include "stagehand/config/config.hpp"
#include "stagehand/util/result.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace stagehand::ddp {

enum class Mode { automatic, tasks, torchrun };

// --ddp-env's argument: none/empty/"(null)" or "auto" is automatic; "tasks"; "torchrun".
Result<Mode> parse_mode(const char* arg);

inline constexpr std::uint32_t k_batch_step_id = 0xfffffffbU;  // SLURM_BATCH_SCRIPT
inline constexpr std::uint32_t k_extern_step_id = 0xfffffffcU; // SLURM_EXTERN_CONT

struct StepLayout
{
  std::uint32_t job_id = 0;
  std::uint32_t step_id = 0;
  std::uint32_t restart_count = 0;
  std::string node_list;            // the step's node list (the job's, for the batch step)
  std::uint32_t nnodes = 0;         // nodes in the step
  std::uint32_t node_id = 0;        // this node's index in the step
  std::uint32_t ntasks = 0;         // tasks in the step
  std::uint32_t local_ntasks = 0;   // tasks of the step on this node
  std::uint32_t global_task_id = 0; // this task's rank
  std::uint32_t local_task_id = 0;  // this task's index on this node
  std::uint32_t gpus_on_node = 0;   // 0 when unknown
  bool batch_step() const { return step_id == k_batch_step_id; }
};

struct EnvVar
{
  std::string name;
  std::string value;
  bool operator==(const EnvVar&) const = default;
};

// MASTER_PORT: port_min + (h(job, restart) + step) mod (port_max - port_min + 1). The same on
// every node; steps of one job get consecutive ports, so they never collide with each other.
int master_port(const DdpConfig& config, std::uint32_t job_id, std::uint32_t step_id, std::uint32_t restart_count);

// Applies the master_addr template ("{host}-ib") to a host name.
std::string master_addr(const DdpConfig& config, const std::string& first_host);

// The variables for one task of the step (or, for the batch step, the job-level MASTER_ADDR and
// NNODES only), followed by the [ddp.env] site defaults.
Result<std::vector<EnvVar>> compute_environment(const DdpConfig& config, const StepLayout& step, Mode mode);

// "2(x3),1" -> {2, 2, 2, 1}: Slurm's SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE.
Result<std::vector<std::uint32_t>> parse_tasks_per_node(std::string_view text);

// A step's layout from a task's SLURM_* environment (as recorded from real srun runs).
Result<StepLayout> layout_from_env(const std::map<std::string, std::string>& env);

// The variable that records what stagehand exported, so that a step inside a batch script can
// tell its own earlier values (which it may replace) from the user's (which it never touches).
inline constexpr const char* k_marker_env = "STAGEHAND_DDP_SET";

struct ExportPlan
{
  std::vector<EnvVar> set; // to export
  std::string marker;      // the new value of k_marker_env
};

// Decides what to export: a variable absent from the task's environment is set; one present is
// replaced only if the marker says stagehand set it to exactly its current value.
ExportPlan plan_exports(const std::vector<EnvVar>& wanted,
                        const std::function<std::optional<std::string>(const std::string&)>& current);

} // namespace stagehand::ddp
