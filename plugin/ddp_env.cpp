// task_init: the task's PyTorch distributed environment, from slurmstepd's own view of the step.
#include "plugin.hpp"

#include "stagehand/ddp/task_plan.hpp"

#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace stagehand::plugin {

namespace {

// The spank item behind each step item (all uint32_t, but S_TASK_ID, an int); terminal,
// torchrun and cpus_per_task are computed below.
constexpr std::pair<ddp::StepItem, spank_item_t> k_items[] = {
  {ddp::StepItem::job_id, S_JOB_ID},
  {ddp::StepItem::step_id, S_JOB_STEPID},
  {ddp::StepItem::restart_count, S_SLURM_RESTART_COUNT},
  {ddp::StepItem::nnodes, S_JOB_NNODES},
  {ddp::StepItem::node_id, S_JOB_NODEID},
  {ddp::StepItem::ntasks, S_JOB_TOTAL_TASK_COUNT},
  {ddp::StepItem::local_ntasks, S_JOB_LOCAL_TASK_COUNT},
  {ddp::StepItem::global_task_id, S_TASK_GLOBAL_ID},
  {ddp::StepItem::local_task_id, S_TASK_ID},
};

// The CPUs this task may run on: what Slurm gave it, or fewer where the task is bound to fewer.
std::optional<std::uint32_t> task_cpus(spank_t sp)
{
  std::uint32_t per_task = 0;
  if (spank_get_item(sp, S_STEP_CPUS_PER_TASK, &per_task) != ESPANK_SUCCESS || per_task == 0) {
    return std::nullopt;
  }
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) {
    per_task = std::min(per_task, static_cast<std::uint32_t>(CPU_COUNT(&set)));
  }
  return per_task;
}

// Whether the task runs torchrun: `torchrun ...` or `python -m torch.distributed.run ...`.
bool runs_torchrun(spank_t sp)
{
  int argc = 0;
  char** argv = nullptr;
  if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || argc < 1 || !argv) {
    return false;
  }
  std::string_view cmd = argv[0];
  if (cmd.substr(cmd.rfind('/') + 1) == "torchrun") {
    return true;
  }
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string_view(argv[i]) == "-m" &&
        (std::string_view(argv[i + 1]) == "torch.distributed.run" ||
         std::string_view(argv[i + 1]) == "torch.distributed.launch")) {
      return true;
    }
  }
  return false;
}

// slurmstepd's view of the step: its spank items, and the task's environment.
ddp::StepLookup spank_lookup(spank_t sp)
{
  auto item = [sp](ddp::StepItem wanted) -> std::optional<std::uint32_t> {
    if (wanted == ddp::StepItem::terminal) {
      return ::isatty(STDIN_FILENO) ? 1U : 0U; // slurmstepd gives task 0 of a --pty step the terminal
    }
    if (wanted == ddp::StepItem::cpus_per_task) {
      return task_cpus(sp);
    }
    if (wanted == ddp::StepItem::torchrun) {
      return runs_torchrun(sp) ? 1U : 0U;
    }
    for (const auto& [step_item, spank_item] : k_items) {
      if (step_item != wanted) {
        continue;
      }
      if (spank_item == S_TASK_ID) {
        int v = 0;
        return spank_get_item(sp, spank_item, &v) == ESPANK_SUCCESS ? std::optional(static_cast<std::uint32_t>(v))
                                                                    : std::nullopt;
      }
      std::uint32_t v = 0;
      return spank_get_item(sp, spank_item, &v) == ESPANK_SUCCESS ? std::optional(v) : std::nullopt;
    }
    return std::nullopt;
  };
  return ddp::StepLookup{item, [sp](const std::string& name) { return task_env(sp, name); }};
}

// Whether this task can listen on `port` now, as PyTorch's TCPStore (or torchrun) will: on every
// IPv4 address, with SO_REUSEADDR, so only a socket that holds the port counts.
bool can_bind(int port)
{
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return true; // cannot tell: let PyTorch report it
  }
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool busy = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 && errno == EADDRINUSE;
  ::close(fd);
  return !busy;
}

} // namespace

bool has_ddp_marker(spank_t sp)
{
  char byte = 0; // a lookup without a copy: too small for any value, so NOSPACE means it is there
  const spank_err_t rc = spank_getenv(sp, ddp::k_marker_env, &byte, 1);
  return rc == ESPANK_SUCCESS || rc == ESPANK_NOSPACE;
}

int export_ddp_env(spank_t sp, const Config& config, std::optional<ddp::Mode> requested)
{
  auto plan = ddp::plan_task(config.ddp, spank_lookup(sp), requested);
  if (!plan) {
    // Every task of the step fails the same way: one line for the user, from rank 0
    // (SLURM_PROCID, which slurmstepd sets for this task with the het offset); the other tasks
    // say it in their node's slurmd log only, so a node whose tasks end first is not silent there.
    const std::string& m = plan.error().message;
    const char* prefix = m.starts_with("--ddp-env") ? "" : "--ddp-env: ";
    if (auto rank = task_env(sp, "SLURM_PROCID").value_or("0"); rank == "0") {
      slurm_error("stagehand: %s%s", prefix, m.c_str());
    } else {
      slurm_info("stagehand: task %s: %s%s", rank.c_str(), prefix, m.c_str());
    }
    return -1;
  }
  for (const auto& name : plan->unset) {
    spank_unsetenv(sp, name.c_str());
  }
  for (const auto& var : plan->set) {
    if (spank_setenv(sp, var.name.c_str(), var.value.c_str(), 1) != ESPANK_SUCCESS) {
      slurm_error("stagehand: --ddp-env: cannot set %s", var.name.c_str());
      return -1;
    }
  }
  for (const auto& line : plan->warnings) {
    slurm_spank_log("stagehand: warning: %s", line.c_str());
  }
  if (plan->check_port && !can_bind(plan->check_port->port)) {
    if (!plan->check_port->fatal) {
      slurm_spank_log("stagehand: warning: %s", plan->check_port->busy_message.c_str());
      return 0;
    }
    slurm_error("stagehand: %s", plan->check_port->busy_message.c_str());
    return -1;
  }
  return 0;
}

} // namespace stagehand::plugin
