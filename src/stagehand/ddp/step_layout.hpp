// A task's place in its step (ranks, node index, per-node counts), built by one function from a
// lookup: the plugin passes slurmstepd's view (spank items and the task's environment), the tests
// pass environments recorded from real srun runs, and both run the same builder.
#pragma once

#include "stagehand/util/result.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace stagehand::ddp {

inline constexpr std::uint32_t k_batch_step_id = 0xfffffffbU;       // SLURM_BATCH_SCRIPT
inline constexpr std::uint32_t k_extern_step_id = 0xfffffffcU;      // SLURM_EXTERN_CONT
inline constexpr std::uint32_t k_interactive_step_id = 0xfffffffaU; // SLURM_INTERACTIVE_STEP

// What a task's step is for: a step of ranks, or a shell that starts steps of its own (the batch
// script, salloc's interactive step, a one-task `srun --pty`), which gets job-level values only.
enum class StepKind { ranks, job_level };

struct StepLayout
{
  StepKind kind = StepKind::ranks;
  std::uint32_t job_id = 0;         // the heterogeneous job's id for a step over several components
  std::uint32_t step_id = 0;
  std::uint32_t restart_count = 0;
  std::string node_list;            // the step's node list (the job's, for job-level steps)
  std::uint32_t nnodes = 0;         // nodes in the step
  std::uint32_t node_id = 0;        // this node's index in the step
  std::uint32_t ntasks = 0;         // tasks in the step
  std::uint32_t local_ntasks = 0;   // tasks of the step on this node
  std::uint32_t global_task_id = 0; // this task's rank
  std::uint32_t local_task_id = 0;  // this task's index on this node
  std::string host;                 // this node's name (SLURMD_NODENAME), empty when unknown
  std::string rank0_host;           // the node of index 0, where a heterogeneous step's node list does
                                    // not start with it (Slurm sorts that list); else empty
  bool heterogeneous = false;       // a step over several components of a heterogeneous job
  std::uint32_t gpus_on_node = 0;   // SLURM_GPUS_ON_NODE, else the count in CUDA_VISIBLE_DEVICES; 0: unknown
  std::uint32_t visible_gpus = 0;   // devices in the task's CUDA_VISIBLE_DEVICES; 0: unset or empty
  std::uint32_t cpus_per_task = 0;  // CPUs this task may use; 0: unknown
  bool runs_torchrun = false;       // the task's command is torchrun
  std::optional<int> reserved_port; // the step's own port from SLURM_STEP_RESV_PORTS (MpiParams=ports=)
  bool job_level() const { return kind == StepKind::job_level; }
  bool batch_step() const { return step_id == k_batch_step_id; }
};

// The numbers slurmstepd holds for the step and the task (its spank items).
enum class StepItem
{
  job_id,         // S_JOB_ID
  step_id,        // S_JOB_STEPID
  restart_count,  // S_SLURM_RESTART_COUNT
  nnodes,         // S_JOB_NNODES: nodes in the step
  node_id,        // S_JOB_NODEID
  ntasks,         // S_JOB_TOTAL_TASK_COUNT: tasks in the step
  local_ntasks,   // S_JOB_LOCAL_TASK_COUNT
  global_task_id, // S_TASK_GLOBAL_ID
  local_task_id,  // S_TASK_ID
  cpus_per_task,  // S_STEP_CPUS_PER_TASK
  terminal,       // 1 when the task's standard input is a terminal (srun --pty), else 0
  torchrun,       // 1 when the task's command is torchrun (or python -m torch.distributed.run), else 0
};

const char* item_name(StepItem item);

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// Everything the builder may ask about a step: an item (nullopt when there is none) and a
// variable of the task's environment. Further step kinds become more items or variables here and
// one more branch in build_step_layout, so the plugin and the recorded tests get them together.
struct StepLookup
{
  std::function<std::optional<std::uint32_t>(StepItem)> item;
  EnvLookup env;
};

// The layout of this task's step.
// - The batch step, salloc's interactive step and a one-task step whose task has a terminal
//   (`srun --pty bash`) are job-level: the job's node list and node count only.
// - A heterogeneous step (`srun --het-group=0,1`): the spank items describe this component only,
//   while the task's environment describes the whole step (srun sets SLURM_STEP_NUM_TASKS/
//   NUM_NODES for all components; slurmstepd sets SLURM_PROCID and SLURM_NODEID with the
//   component's offsets and SLURM_JOB_ID to the het job's id): when the two disagree on the task
//   count, ranks, node index, counts and job id come from the environment. Node index 0 (rank 0)
//   is the first node of het group 0 (SLURM_JOB_NODELIST_HET_GROUP_0): srun sorts the step's
//   node list, so its first host may be another component's. No reserved port: srun merges the
//   components' reservations into one list, which does not tell which ports node 0 holds.
// - The GPU count comes from SLURM_GPUS_ON_NODE, else CUDA_VISIBLE_DEVICES; the reserved port
//   is the last of SLURM_STEP_RESV_PORTS (see reserved_port()).
Result<StepLayout> build_step_layout(const StepLookup& lookup);

// The port a step may use from SLURM_STEP_RESV_PORTS ("12000-12004", "12000,12003-12004"): the
// last one. Slurm reserves one port more than the step's most tasks on a node, so MPI libraries
// that take one port per local task never reach the last. nullopt when the text is not a list
// of ports.
std::optional<int> reserved_port(std::string_view resv_ports);

// A lookup over a task's environment alone, as srun sets it: each item is read from the
// variable slurmstepd derives from it (SLURM_JOB_ID, SLURM_STEP_ID, SLURM_RESTART_COUNT,
// SLURM_STEP_NUM_NODES, SLURM_NODEID, SLURM_STEP_NUM_TASKS, SLURM_PROCID, SLURM_LOCALID,
// SLURM_CPUS_PER_TASK, and this node's entry of SLURM_STEP_TASKS_PER_NODE); `terminal` and
// `torchrun` are not in the environment (nullopt: no). An environment recorded with the spank
// items themselves ("@global_task_id=0", "@terminal=1": where they differ from the variables, as
// in heterogeneous and --pty steps) gives those. For recorded environments and for tools that
// run outside slurmstepd.
StepLookup env_step_lookup(EnvLookup env);

// "2(x3),1" -> {2, 2, 2, 1}: Slurm's SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE.
Result<std::vector<std::uint32_t>> parse_tasks_per_node(std::string_view text);

} // namespace stagehand::ddp
