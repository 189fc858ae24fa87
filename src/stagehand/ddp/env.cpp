// DDP environment: port, layout and the never-overwrite policy.
#include "stagehand/ddp/env.hpp"

#include "stagehand/ddp/hostlist.hpp"
#include "stagehand/util/hash.hpp"
#include "stagehand/util/strings.hpp"
#include "stagehand/util/units.hpp"

#include <algorithm>
#include <set>

namespace stagehand::ddp {

namespace {

std::uint64_t splitmix64(std::uint64_t x)
{
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The marker's record of one value: its FNV-1a hash.
std::string value_hash(std::string_view value) { return to_hex(fnv1a<std::uint32_t>(value), 8); }

} // namespace

Result<Mode> parse_mode(const char* arg)
{
  std::string_view v = arg ? arg : "";
  if (v.empty() || v == "(null)" || v == "auto") {
    return Mode::automatic;
  }
  if (v == "tasks") {
    return Mode::tasks;
  }
  if (v == "torchrun") {
    return Mode::torchrun;
  }
  return Error::refused("--ddp-env: unknown value \"" + std::string(v) + "\" (expected auto, tasks or torchrun)");
}

int master_port(const DdpConfig& config, std::uint32_t job_id, std::uint32_t step_id, std::uint32_t restart_count)
{
  const std::uint64_t range = static_cast<std::uint64_t>(config.port_max - config.port_min) + 1;
  const std::uint64_t base = splitmix64((static_cast<std::uint64_t>(job_id) << 32) | restart_count) % range;
  return config.port_min + static_cast<int>((base + step_id) % range);
}

std::string master_addr(const DdpConfig& config, const std::string& first_host)
{
  std::string out = config.master_addr;
  for (std::size_t at = out.find("{host}"); at != std::string::npos; at = out.find("{host}", at + first_host.size())) {
    out.replace(at, 6, first_host);
  }
  return out;
}

namespace {

// This node's name: SLURMD_NODENAME, else its entry in the step's node list.
Result<std::string> this_host(const StepLayout& step)
{
  if (!step.host.empty()) {
    return step.host;
  }
  auto hosts = expand_hostlist(step.node_list);
  if (!hosts) {
    return hosts.error();
  }
  if (step.node_id >= hosts->size()) {
    return Error::internal("node index " + std::to_string(step.node_id) + " is not in " + step.node_list);
  }
  return (*hosts)[step.node_id];
}

std::string rdzv_conf(bool is_host)
{
  const std::string t = std::to_string(k_rdzv_timeout_s);
  return std::string("is_host=") + (is_host ? "1" : "0") + ",read_timeout=" + t + ",join_timeout=" + t;
}

} // namespace

Result<std::vector<EnvVar>> compute_environment(const DdpConfig& config, const StepLayout& step, Mode mode)
{
  auto first = step.rank0_host.empty() ? first_host(step.node_list) : Result<std::string>(step.rank0_host);
  if (!first) {
    return first.error();
  }
  const std::string addr = master_addr(config, *first);
  std::vector<EnvVar> env;
  auto add = [&](const char* name, std::string value) { env.push_back(EnvVar{name, std::move(value)}); };

  if (step.job_level()) {
    add("MASTER_ADDR", addr);
    add("NNODES", std::to_string(step.nnodes));
  } else {
    // Slurm puts at least one task on every node of a step: equal counts mean one per node.
    const bool one_per_node = step.ntasks == step.nnodes;
    if (mode == Mode::torchrun && !one_per_node) {
      return Error::refused("--ddp-env=torchrun: this step has " + std::to_string(step.ntasks) + " tasks on " +
                            std::to_string(step.nnodes) + " node" + (step.nnodes == 1 ? "" : "s") +
                            "; torchrun starts the workers itself, so start one torchrun per node "
                            "(srun --ntasks-per-node=1)");
    }
    const int port_number = step.reserved_port.value_or(
      master_port(config, step.job_id, step.step_id, step.restart_count));
    const std::string port = std::to_string(port_number);
    const bool tasks = mode == Mode::tasks || mode == Mode::automatic;
    const bool torchrun = mode == Mode::torchrun || (mode == Mode::automatic && one_per_node);
    add("MASTER_ADDR", addr);
    add("MASTER_PORT", port);
    add("NODE_RANK", std::to_string(step.node_id));
    add("NNODES", std::to_string(step.nnodes));
    if (tasks) {
      add("WORLD_SIZE", std::to_string(step.ntasks));
      add("RANK", std::to_string(step.global_task_id));
      add("LOCAL_RANK", std::to_string(step.local_task_id));
      add("LOCAL_WORLD_SIZE", std::to_string(step.local_ntasks));
    }
    if (torchrun) {
      auto host = this_host(step);
      if (!host) {
        return host.error();
      }
      add("PET_NNODES", std::to_string(step.nnodes));
      // The same index as NODE_RANK, and node rank 0 is the host of the store (MASTER_ADDR). c10d
      // ignores it and numbers the nodes in its own order (torchrun's GROUP_RANK).
      add("PET_NODE_RANK", std::to_string(step.node_id));
      add("PET_NPROC_PER_NODE", std::to_string(step.gpus_on_node > 0 ? step.gpus_on_node : 1));
      add("PET_RDZV_BACKEND", "c10d");
      add("PET_RDZV_ENDPOINT", addr + ":" + port);
      add("PET_RDZV_ID", std::to_string(step.job_id) + "." + std::to_string(step.step_id) + "." +
                           std::to_string(step.restart_count));
      add("PET_MASTER_ADDR", addr);
      add("PET_MASTER_PORT", port);
      // This node's address on the same network as the store ("{host}-ib" for "{host}-ib").
      add("PET_LOCAL_ADDR", master_addr(config, *host));
      // torchrun otherwise guesses the store host by comparing the endpoint with its hostname.
      add("PET_RDZV_CONF", rdzv_conf(step.node_id == 0));
    }
  }
  for (const auto& [name, value] : config.env) {
    env.push_back(EnvVar{name, value});
  }
  return env;
}

namespace {

// The marker's entries: after "JOBID;" when there is one.
std::string_view marker_entries(std::string_view marker)
{
  std::size_t semi = marker.find(';');
  return semi == std::string_view::npos ? marker : marker.substr(semi + 1);
}

} // namespace

std::optional<std::uint32_t> marker_job_id(std::string_view marker)
{
  std::size_t semi = marker.find(';');
  return semi == std::string_view::npos ? std::nullopt : parse_u32(marker.substr(0, semi));
}

std::vector<std::string> stagehand_values(const EnvLookupFn& current)
{
  std::vector<std::string> ours;
  auto marker = current(k_marker_env);
  if (!marker) {
    return ours;
  }
  for (std::string_view item : split(marker_entries(*marker), ',')) {
    std::size_t colon = item.find(':');
    if (colon == std::string_view::npos) {
      continue;
    }
    std::string name(item.substr(0, colon));
    auto value = current(name);
    if (value && value_hash(*value) == item.substr(colon + 1) &&
        std::find(ours.begin(), ours.end(), name) == ours.end()) {
      ours.push_back(std::move(name));
    }
  }
  return ours;
}

ExportPlan plan_exports(const std::vector<EnvVar>& wanted, const EnvLookupFn& current)
{
  const std::vector<std::string> ours = stagehand_values(current);
  auto is_ours = [&](const std::string& name) { return std::find(ours.begin(), ours.end(), name) != ours.end(); };
  ExportPlan plan;
  std::set<std::string> wanted_names;
  for (const auto& var : wanted) {
    wanted_names.insert(var.name);
    if (current(var.name) && !is_ours(var.name)) {
      continue; // the user's value wins
    }
    plan.set.push_back(var);
    append_joined(plan.marker, ",", var.name + ":" + value_hash(var.value));
  }
  for (const auto& name : ours) {
    if (!wanted_names.count(name)) {
      plan.unset.push_back(name);
    }
  }
  return plan;
}

} // namespace stagehand::ddp
