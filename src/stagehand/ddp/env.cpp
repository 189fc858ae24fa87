// DDP environment: port, layout and the never-overwrite policy.
#include "stagehand/ddp/env.hpp"
#include "stagehand/util/strings.hpp"

#include "stagehand/ddp/hostlist.hpp"
#include "stagehand/util/units.hpp"

#include <cstdio>
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

std::uint32_t fnv1a(std::string_view s)
{
  std::uint32_t h = 2166136261U;
  for (unsigned char c : s) {
    h = (h ^ c) * 16777619U;
  }
  return h;
}

std::string hex32(std::uint32_t v)
{
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

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
  return Error::invalid("--ddp-env: unknown value \"" + std::string(v) + "\" (expected auto, tasks or torchrun)");
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

Result<std::vector<EnvVar>> compute_environment(const DdpConfig& config, const StepLayout& step, Mode mode)
{
  auto first = first_host(step.node_list);
  if (!first) {
    return first.error();
  }
  const std::string addr = master_addr(config, *first);
  std::vector<EnvVar> env;
  auto add = [&](const char* name, std::string value) { env.push_back(EnvVar{name, std::move(value)}); };

  if (step.batch_step()) {
    add("MASTER_ADDR", addr);
    add("NNODES", std::to_string(step.nnodes));
  } else {
    const std::string port = std::to_string(master_port(config, step.job_id, step.step_id, step.restart_count));
    const bool one_per_node = step.ntasks == step.nnodes;
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
      add("PET_NNODES", std::to_string(step.nnodes));
      add("PET_NODE_RANK", std::to_string(step.node_id));
      add("PET_NPROC_PER_NODE", std::to_string(step.gpus_on_node > 0 ? step.gpus_on_node : 1));
      add("PET_RDZV_BACKEND", "c10d");
      add("PET_RDZV_ENDPOINT", addr + ":" + port);
      add("PET_RDZV_ID", std::to_string(step.job_id) + "." + std::to_string(step.step_id) + "." +
                           std::to_string(step.restart_count));
      add("PET_MASTER_ADDR", addr);
      add("PET_MASTER_PORT", port);
      // torchrun otherwise guesses the store host by comparing the endpoint with its hostname.
      add("PET_RDZV_CONF", step.node_id == 0 ? "is_host=1" : "is_host=0");
    }
  }
  for (const auto& [name, value] : config.env) {
    env.push_back(EnvVar{name, value});
  }
  return env;
}

Result<std::vector<std::uint32_t>> parse_tasks_per_node(std::string_view text)
{
  std::vector<std::uint32_t> out;
  auto bad = [&] { return Error::invalid("bad tasks-per-node \"" + std::string(text) + "\""); };
  if (text.empty()) {
    return bad();
  }
  for (std::string_view item : split(text, ',')) {
    std::uint32_t repeat = 1;
    if (std::size_t paren = item.find("(x"); paren != std::string_view::npos) {
      if (item.back() != ')') {
        return bad();
      }
      auto r = parse_u32(item.substr(paren + 2, item.size() - paren - 3));
      if (!r || *r == 0 || *r > k_max_hosts) {
        return bad();
      }
      repeat = *r;
      item = item.substr(0, paren);
    }
    auto count = parse_u32(item);
    if (!count || out.size() + repeat > k_max_hosts) {
      return bad();
    }
    out.insert(out.end(), repeat, *count);
  }
  if (out.empty()) {
    return bad();
  }
  return out;
}

Result<StepLayout> layout_from_env(const std::map<std::string, std::string>& env)
{
  auto get = [&](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional(it->second);
  };
  auto num = [&](const char* name) -> Result<std::uint32_t> {
    auto v = get(name);
    auto n = v ? parse_u32(*v) : std::nullopt;
    if (!n) {
      return Error::invalid(std::string(name) + " is missing or not a number");
    }
    return *n;
  };
  StepLayout s;
  auto job = num("SLURM_JOB_ID");
  auto step = num("SLURM_STEP_ID");
  auto node = num("SLURM_NODEID");
  auto rank = num("SLURM_PROCID");
  auto local = num("SLURM_LOCALID");
  auto ntasks = num("SLURM_STEP_NUM_TASKS");
  auto nodes = get("SLURM_STEP_NODELIST");
  auto tpn_text = get("SLURM_STEP_TASKS_PER_NODE");
  for (const auto* r : {&job, &step, &node, &rank, &local, &ntasks}) {
    if (!*r) {
      return r->error();
    }
  }
  if (!nodes || !tpn_text) {
    return Error::invalid("SLURM_STEP_NODELIST or SLURM_STEP_TASKS_PER_NODE is missing");
  }
  auto tpn = parse_tasks_per_node(*tpn_text);
  if (!tpn) {
    return tpn.error();
  }
  if (*node >= tpn->size()) {
    return Error::invalid("SLURM_NODEID is beyond SLURM_STEP_TASKS_PER_NODE");
  }
  s.job_id = *job;
  s.step_id = *step;
  s.restart_count = get("SLURM_RESTART_COUNT") ? parse_u32(*get("SLURM_RESTART_COUNT")).value_or(0) : 0;
  s.node_list = *nodes;
  s.nnodes = static_cast<std::uint32_t>(tpn->size());
  s.node_id = *node;
  s.ntasks = *ntasks;
  s.local_ntasks = (*tpn)[*node];
  s.global_task_id = *rank;
  s.local_task_id = *local;
  return s;
}

ExportPlan plan_exports(const std::vector<EnvVar>& wanted,
                        const std::function<std::optional<std::string>(const std::string&)>& current)
{
  // Marker format: NAME:hash,NAME:hash (the hash of the value stagehand exported).
  std::set<std::string> ours;
  if (auto marker = current(k_marker_env)) {
    std::string_view m = *marker;
    while (!m.empty()) {
      std::size_t comma = m.find(',');
      std::string_view item = m.substr(0, comma);
      std::size_t colon = item.find(':');
      if (colon != std::string_view::npos) {
        std::string name(item.substr(0, colon));
        auto value = current(name);
        if (value && hex32(fnv1a(*value)) == item.substr(colon + 1)) {
          ours.insert(name);
        }
      }
      m = comma == std::string_view::npos ? std::string_view() : m.substr(comma + 1);
    }
  }
  ExportPlan plan;
  for (const auto& var : wanted) {
    if (current(var.name) && !ours.count(var.name)) {
      continue; // the user's value wins
    }
    plan.set.push_back(var);
    plan.marker += (plan.marker.empty() ? "" : ",") + var.name + ":" + hex32(fnv1a(var.value));
  }
  return plan;
}

} // namespace stagehand::ddp
