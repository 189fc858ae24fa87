// The step-layout builder and the environment-only lookup.
#include "stagehand/ddp/step_layout.hpp"

#include "stagehand/ddp/hostlist.hpp"
#include "stagehand/util/strings.hpp"
#include "stagehand/util/units.hpp"

#include <algorithm>

namespace stagehand::ddp {

namespace {

// Each item's name in messages, and the variable srun sets from it in a task's environment
// (none for local_ntasks: it is this node's entry of SLURM_STEP_TASKS_PER_NODE; none for terminal
// and torchrun).
struct ItemInfo
{
  StepItem item;
  const char* name;
  const char* key; // "@KEY=VALUE" in a recorded environment
  const char* env;
};
constexpr ItemInfo k_items[] = {
  {StepItem::job_id, "job id", "job_id", "SLURM_JOB_ID"},
  {StepItem::step_id, "step id", "step_id", "SLURM_STEP_ID"},
  {StepItem::restart_count, "restart count", "restart_count", "SLURM_RESTART_COUNT"},
  {StepItem::nnodes, "node count", "nnodes", "SLURM_STEP_NUM_NODES"},
  {StepItem::node_id, "node index", "node_id", "SLURM_NODEID"},
  {StepItem::ntasks, "task count", "ntasks", "SLURM_STEP_NUM_TASKS"},
  {StepItem::local_ntasks, "local task count", "local_ntasks", nullptr},
  {StepItem::global_task_id, "global task id", "global_task_id", "SLURM_PROCID"},
  {StepItem::local_task_id, "local task id", "local_task_id", "SLURM_LOCALID"},
  {StepItem::cpus_per_task, "CPUs per task", "cpus_per_task", "SLURM_CPUS_PER_TASK"},
  {StepItem::terminal, "terminal", "terminal", nullptr},
  {StepItem::torchrun, "torchrun", "torchrun", nullptr},
};

const ItemInfo& info(StepItem item)
{
  for (const auto& i : k_items) {
    if (i.item == item) {
      return i;
    }
  }
  return k_items[0]; // not reached: every item is in the table
}

std::uint32_t count_devices(const std::optional<std::string>& list)
{
  return list && !list->empty() ? static_cast<std::uint32_t>(std::count(list->begin(), list->end(), ',') + 1) : 0;
}

// The batch script, salloc's interactive step and `srun --pty bash` run once, on one node, with
// the job's node list: a shell that starts steps of its own.
Result<StepLayout> job_level_layout(StepLayout s, const EnvLookup& env)
{
  auto nodes = env("SLURM_JOB_NODELIST");
  if (!nodes) {
    return Error::internal("SLURM_JOB_NODELIST is not set");
  }
  auto hosts = expand_hostlist(*nodes);
  if (!hosts) {
    return hosts.error();
  }
  s.kind = StepKind::job_level;
  s.node_list = *nodes;
  s.nnodes = static_cast<std::uint32_t>(hosts->size());
  return s;
}

bool is_job_level(const StepLookup& lookup, std::uint32_t step_id)
{
  if (step_id == k_batch_step_id || step_id == k_interactive_step_id) {
    return true;
  }
  // Only task 0 of a --pty step has the terminal: a step of several tasks stays a step of ranks.
  return lookup.item(StepItem::terminal).value_or(0) == 1 && lookup.item(StepItem::ntasks).value_or(0) == 1;
}

// A step over several components of a heterogeneous job: the whole step's numbers from the
// environment (see build_step_layout).
Status apply_het_environment(StepLayout& s, const EnvLookup& env)
{
  const std::pair<const char*, std::uint32_t*> fields[] = {
    {"SLURM_JOB_ID", &s.job_id},          {"SLURM_PROCID", &s.global_task_id}, {"SLURM_NODEID", &s.node_id},
    {"SLURM_STEP_NUM_TASKS", &s.ntasks}, {"SLURM_STEP_NUM_NODES", &s.nnodes},
  };
  for (const auto& [name, field] : fields) {
    auto v = env(name);
    auto n = v ? parse_u32(*v) : std::nullopt;
    if (!n) {
      return Error::internal(std::string("heterogeneous step: cannot read ") + name);
    }
    *field = *n;
  }
  if (s.global_task_id >= s.ntasks || s.node_id >= s.nnodes) {
    return Error::internal("heterogeneous step: SLURM_PROCID or SLURM_NODEID out of range");
  }
  // sbatch and salloc set both names of group 0's node list; an `srun A : B` that makes its own
  // het job sets only the old one (Slurm's _PACK_GROUP_, still so in 25.11).
  auto group0 = env("SLURM_JOB_NODELIST_HET_GROUP_0");
  if (!group0) {
    group0 = env("SLURM_JOB_NODELIST_PACK_GROUP_0");
  }
  auto first = group0 ? first_host(*group0) : Result<std::string>(Error::internal(""));
  if (!first) {
    return Error::internal("heterogeneous step: cannot read SLURM_JOB_NODELIST_HET_GROUP_0 (nor _PACK_GROUP_0)");
  }
  s.rank0_host = *first;
  s.heterogeneous = true;
  return ok_status();
}

} // namespace

const char* item_name(StepItem item) { return info(item).name; }

Result<StepLayout> build_step_layout(const StepLookup& lookup)
{
  StepLayout s;
  auto job = lookup.item(StepItem::job_id);
  auto step = lookup.item(StepItem::step_id);
  if (!job || !step) {
    return Error::internal("cannot read the job and step ids");
  }
  s.job_id = *job;
  s.step_id = *step;
  s.restart_count = lookup.item(StepItem::restart_count).value_or(0);
  if (is_job_level(lookup, s.step_id)) {
    return job_level_layout(std::move(s), lookup.env);
  }
  // slurmstepd sets this in the task's environment right before task_init.
  auto nodes = lookup.env("SLURM_STEP_NODELIST");
  if (!nodes) {
    return Error::internal("SLURM_STEP_NODELIST is not set");
  }
  s.node_list = *nodes;
  const std::pair<StepItem, std::uint32_t*> fields[] = {
    {StepItem::nnodes, &s.nnodes},
    {StepItem::node_id, &s.node_id},
    {StepItem::ntasks, &s.ntasks},
    {StepItem::local_ntasks, &s.local_ntasks},
    {StepItem::global_task_id, &s.global_task_id},
    {StepItem::local_task_id, &s.local_task_id},
  };
  for (const auto& [item, field] : fields) {
    auto v = lookup.item(item);
    if (!v) {
      return Error::internal(std::string("cannot read the step's task layout (") + item_name(item) + ")");
    }
    *field = *v;
  }
  if (auto whole = lookup.env("SLURM_STEP_NUM_TASKS"); whole && parse_u32(*whole) != s.ntasks) {
    if (auto het = apply_het_environment(s, lookup.env); !het) {
      return het.error();
    }
  }
  s.host = lookup.env("SLURMD_NODENAME").value_or("");
  s.gpus_on_node = count_devices(lookup.env("CUDA_VISIBLE_DEVICES"));
  s.visible_gpus = s.gpus_on_node;
  if (auto g = lookup.env("SLURM_GPUS_ON_NODE")) {
    s.gpus_on_node = parse_u32(*g).value_or(0);
  }
  s.cpus_per_task = lookup.item(StepItem::cpus_per_task).value_or(0);
  s.runs_torchrun = lookup.item(StepItem::torchrun).value_or(0) == 1;
  if (auto ports = lookup.env("SLURM_STEP_RESV_PORTS"); ports && !s.heterogeneous) {
    s.reserved_port = reserved_port(*ports);
  }
  return s;
}

std::optional<int> reserved_port(std::string_view resv_ports)
{
  // The last number of the list: after the last ',' and the last '-'.
  std::string_view last = resv_ports.substr(resv_ports.find_last_of(",-") + 1);
  for (char c : resv_ports) {
    if (!(c == ',' || c == '-' || (c >= '0' && c <= '9'))) {
      return std::nullopt;
    }
  }
  auto port = parse_u32(last);
  if (!port || *port == 0 || *port > 65535) {
    return std::nullopt;
  }
  return static_cast<int>(*port);
}

StepLookup env_step_lookup(EnvLookup env)
{
  auto number = [env](const char* name) -> std::optional<std::uint32_t> {
    auto v = env(name);
    return v ? parse_u32(*v) : std::nullopt;
  };
  auto item = [env, number](StepItem i) -> std::optional<std::uint32_t> {
    if (auto recorded = number((std::string("@") + info(i).key).c_str())) {
      return recorded;
    }
    if (const char* name = info(i).env) {
      return number(name);
    }
    if (i != StepItem::local_ntasks) {
      return std::nullopt; // terminal, torchrun: not in the environment
    }
    auto node = number("SLURM_NODEID");
    auto text = env("SLURM_STEP_TASKS_PER_NODE");
    if (!node || !text) {
      return std::nullopt;
    }
    auto per_node = parse_tasks_per_node(*text);
    if (!per_node || *node >= per_node->size()) {
      return std::nullopt;
    }
    return (*per_node)[*node];
  };
  return StepLookup{std::move(item), std::move(env)};
}

Result<std::vector<std::uint32_t>> parse_tasks_per_node(std::string_view text)
{
  std::vector<std::uint32_t> out;
  auto bad = [&] { return Error::refused("bad tasks-per-node \"" + std::string(text) + "\""); };
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

} // namespace stagehand::ddp
