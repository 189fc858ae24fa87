// What --ddp-env does in one task, decided in one pure function: from the step's layout and the
// task's environment to the variables to set and remove, the new marker, the port to check and
// the warnings to print. The plugin applies the plan in task_init; the tests run the same
// function over environments recorded on the test cluster.
#pragma once

#include "stagehand/config/config.hpp"
#include "stagehand/ddp/env.hpp"
#include "stagehand/ddp/step_layout.hpp"
#include "stagehand/util/result.hpp"

#include <optional>
#include <string>
#include <vector>

namespace stagehand::ddp {

// The port that node 0's first task checks it can bind before the task starts, and the line that
// fails the task when it cannot (a warning only, in a step that did not ask for --ddp-env).
struct PortCheck
{
  int port = 0;
  std::string busy_message; // without the "stagehand: " prefix
  bool fatal = true;
};

struct TaskPlan
{
  std::vector<EnvVar> set;           // the marker (k_marker_env) last
  std::vector<std::string> unset;    // stagehand's values from an enclosing step (and the marker)
  std::optional<PortCheck> check_port;
  std::vector<std::string> warnings; // one line each, without the "stagehand: " prefix
};

// `requested` is the step's own --ddp-env (nullopt when the step did not ask for it).
// - A step that asked gets its values; what stagehand exported in an enclosing step of the job
//   (the batch script, a task that runs srun) is replaced or removed, the user's values stay.
// - A step that did not ask, started from a task of the same job that has stagehand's values
//   (`srun --pty --ddp-env bash`, then srun inside), gets its own values too (mode auto): the
//   enclosing step's values never leak into it. A marker of another job (sbatch from inside a
//   task) only has its values removed.
// - Warnings (once per node, from its first task): tasks that must share GPUs, and a torchrun
//   task with fewer CPUs than workers.
Result<TaskPlan> plan_task(const DdpConfig& config, const StepLookup& lookup, std::optional<Mode> requested);

} // namespace stagehand::ddp
