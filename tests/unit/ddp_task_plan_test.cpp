// --ddp-env per task (ddp::plan_task) over environments recorded on the test cluster: steps inside
// steps, interactive steps, heterogeneous steps, reserved ports, the port check, the warnings.
#include "stagehand/ddp/task_plan.hpp"
#include "step_env.hpp"

#include <gtest/gtest.h>

#include <set>

using namespace stagehand;
using namespace stagehand::ddp;
using test::Env;
using test::recorded_step;

namespace {

Result<TaskPlan> plan_for(const Env& env, std::optional<Mode> requested, const DdpConfig& config = DdpConfig{})
{
  return plan_task(config, test::recorded_lookup(env), requested);
}

// The task's environment after stagehand's task_init.
Env after(const Env& env, std::optional<Mode> requested, const DdpConfig& config = DdpConfig{})
{
  auto plan = plan_for(env, requested, config);
  EXPECT_TRUE(plan) << plan.error().message;
  return plan ? test::apply(env, plan->unset, plan->set) : env;
}

std::string get(const Env& env, const std::string& name)
{
  auto it = env.find(name);
  return it == env.end() ? "(unset)" : it->second;
}

bool has_pet(const Env& env)
{
  for (const auto& [name, value] : env) {
    if (name.starts_with("PET_")) {
      return true;
    }
  }
  return false;
}

} // namespace

// Item 13. Recorded: `srun -N1 -n1 --ddp-env bash -c 'srun --overlap -N2 -n4 ...'` in a 2-node
// allocation. The inner tasks' environments hold the outer task's values (RANK=0, WORLD_SIZE=1,
// its MASTER_PORT and PET_* set), inherited through the nested srun, which does not pass --ddp-env.
TEST(TaskPlan, StepInsideATaskGetsItsOwnValuesNeverTheEnclosingOnes)
{
  auto outer = recorded_step("nested-outer");
  auto inner = recorded_step("nested-inner");
  ASSERT_EQ(outer.size(), 1U);
  ASSERT_EQ(inner.size(), 4U);
  const Env outer_after = after(outer[0], Mode::automatic);
  EXPECT_EQ(get(outer_after, "WORLD_SIZE"), "1");
  EXPECT_EQ(get(outer_after, "MASTER_PORT"), "47420"); // the last of SLURM_STEP_RESV_PORTS=47419-47420
  for (const auto& env : inner) {
    ASSERT_EQ(get(env, "RANK"), "0") << "the recording should hold the outer task's values";
    for (auto requested : {std::optional<Mode>{}, std::optional<Mode>{Mode::automatic}}) {
      const Env e = after(env, requested);
      EXPECT_EQ(get(e, "RANK"), get(env, "SLURM_PROCID"));
      EXPECT_EQ(get(e, "WORLD_SIZE"), "4");
      EXPECT_EQ(get(e, "LOCAL_RANK"), get(env, "SLURM_LOCALID"));
      EXPECT_EQ(get(e, "LOCAL_WORLD_SIZE"), "2");
      EXPECT_EQ(get(e, "NNODES"), "2");
      EXPECT_EQ(get(e, "NODE_RANK"), get(env, "SLURM_NODEID"));
      EXPECT_EQ(get(e, "MASTER_PORT"), "47423"); // this step's reserved 47421-47423, not the outer 47420
      EXPECT_FALSE(has_pet(e)) << "a tasks-mode step keeps no stale PET_* of a one-task-per-node step";
      EXPECT_EQ(marker_job_id(get(e, k_marker_env)), 4U);
    }
  }
}

TEST(TaskPlan, UserValuesSurviveAndAnotherJobsValuesAreOnlyRemoved)
{
  Env env = recorded_step("nested-inner")[1];
  env["NCCL_DEBUG"] = "INFO";
  env["WORLD_SIZE"] = "7"; // changed by the user's script after stagehand set it
  Env e = after(env, std::nullopt);
  EXPECT_EQ(get(e, "WORLD_SIZE"), "7");
  EXPECT_EQ(get(e, "NCCL_DEBUG"), "INFO");
  EXPECT_EQ(get(e, "RANK"), "1");

  // sbatch from inside a task: the new job's steps find the submitting job's marker. Without
  // --ddp-env they only lose stagehand's values; the user's stay.
  env = recorded_step("nested-inner")[1];
  env[k_marker_env] = "99" + env[k_marker_env].substr(env[k_marker_env].find(';'));
  env["NCCL_DEBUG"] = "INFO";
  e = after(env, std::nullopt);
  for (const char* name : {"MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "PET_RDZV_CONF", k_marker_env}) {
    EXPECT_EQ(get(e, name), "(unset)") << name;
  }
  EXPECT_EQ(get(e, "NCCL_DEBUG"), "INFO");
  // With --ddp-env it computes its own as usual.
  EXPECT_EQ(get(after(env, Mode::tasks), "RANK"), "1");

  // A step that did not ask and finds no marker: nothing to do at all.
  auto plain = plan_for(recorded_step("n3-block")[0], std::nullopt);
  ASSERT_TRUE(plain);
  EXPECT_TRUE(plain->set.empty() && plain->unset.empty() && !plain->check_port && plain->warnings.empty());
}

// Item 13: salloc's interactive step (LaunchParameters=use_interactive_step) and `srun --pty bash`
// are treated like the batch script: job-level values, no rank, no port.
TEST(TaskPlan, InteractiveStepsGetJobLevelValues)
{
  for (const char* name : {"interactive", "pty"}) {
    auto env = recorded_step(name);
    ASSERT_EQ(env.size(), 1U) << name;
    auto plan = plan_for(env[0], Mode::automatic);
    ASSERT_TRUE(plan) << plan.error().message;
    auto m = test::as_map(plan->set);
    m.erase(k_marker_env);
    EXPECT_EQ(m, (std::map<std::string, std::string>{{"MASTER_ADDR", "node1"}, {"NNODES", "2"}})) << name;
    EXPECT_FALSE(plan->check_port);
  }
  // The terminal is what tells `srun --pty` apart (SLURM_PTY_PORT is inherited by steps inside).
  Env pty = recorded_step("pty")[0];
  pty["@terminal"] = "0";
  EXPECT_EQ(get(after(pty, Mode::automatic), "RANK"), "0");

  // The steps typed in that shell (srun without --ddp-env) get their own values.
  for (const auto& env : recorded_step("pty-inner")) {
    ASSERT_EQ(get(env, "SLURM_PTY_PORT"), get(recorded_step("pty")[0], "SLURM_PTY_PORT"));
    Env e = after(env, std::nullopt);
    EXPECT_EQ(get(e, "RANK"), get(env, "SLURM_PROCID"));
    EXPECT_EQ(get(e, "WORLD_SIZE"), "2");
    EXPECT_EQ(get(e, "MASTER_PORT"), std::to_string(*reserved_port(env.at("SLURM_STEP_RESV_PORTS"))));
  }
}

// Item 14. Recorded: `srun --het-group=0,1 --ddp-env` over two components of 2 tasks each
// (het: group 0 on node1; het-reversed: group 0 on node2), and `srun -w node2 … : -w node1 …` run
// outside an allocation (het-srun: srun makes the het job, and sets only the _PACK_GROUP_ names).
// The spank items are per component (each has a rank 0 and a task count of 2); one world of 4.
TEST(TaskPlan, HeterogeneousStepIsOneWorld)
{
  for (const auto& [name, rank0_node] :
       {std::pair{"het", "node1"}, std::pair{"het-reversed", "node2"}, std::pair{"het-srun", "node2"}}) {
    auto ranks = recorded_step(name);
    ASSERT_EQ(ranks.size(), 4U);
    std::set<std::string> seen_ranks, ports, addrs, ids, component_ranks;
    for (const auto& env : ranks) {
      component_ranks.insert(get(env, "@global_task_id"));
      const Env e = after(env, Mode::automatic);
      EXPECT_EQ(get(e, "RANK"), get(env, "SLURM_PROCID"));
      EXPECT_EQ(get(e, "WORLD_SIZE"), "4");
      EXPECT_EQ(get(e, "NNODES"), "2");
      EXPECT_EQ(get(e, "NODE_RANK"), get(env, "SLURM_NODEID"));
      EXPECT_EQ(get(e, "LOCAL_WORLD_SIZE"), "2");
      seen_ranks.insert(get(e, "RANK"));
      ports.insert(get(e, "MASTER_PORT"));
      addrs.insert(get(e, "MASTER_ADDR"));
      ids.insert(std::to_string(*marker_job_id(get(e, k_marker_env))));
      if (get(env, "SLURM_PROCID") == "0") {
        EXPECT_EQ(get(env, "SLURMD_NODENAME"), rank0_node);
      }
    }
    ASSERT_EQ(component_ranks, (std::set<std::string>{"0", "1"})) << name << ": the items should be per component";
    EXPECT_EQ(seen_ranks, (std::set<std::string>{"0", "1", "2", "3"})) << name;
    EXPECT_EQ(addrs, std::set<std::string>{rank0_node}) << name << ": MASTER_ADDR must be rank 0's node";
    ASSERT_EQ(ports.size(), 1U) << name;
    // The het job's id (not the component's), and the computed port: the merged reservation list
    // does not tell which ports node 0 holds.
    const auto het_id = static_cast<std::uint32_t>(std::stoul(ranks[0].at("SLURM_JOB_ID")));
    EXPECT_EQ(ids, std::set<std::string>{std::to_string(het_id)});
    EXPECT_EQ(*ports.begin(), std::to_string(master_port(DdpConfig{}, het_id, 0, 0)));
  }
  // Rank 0 somewhere else than group 0's first node (srun --het-group=1,2): refused.
  Env moved = recorded_step("het")[0];
  moved["SLURMD_NODENAME"] = "node2";
  auto r = plan_for(moved, Mode::automatic);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message,
            "--ddp-env: heterogeneous step: rank 0 runs on node2, not on node1, the first node of het group 0, where "
            "MASTER_ADDR points; run the step on group 0 and all its nodes (srun --het-group=0,...)");
}

// Item 16: PET_NODE_RANK is NODE_RANK; node rank 0 hosts the store at MASTER_ADDR; PET_LOCAL_ADDR
// is this node's name through the master_addr template.
TEST(TaskPlan, TorchrunNodeRankHostAndLocalAddressAgree)
{
  DdpConfig c;
  c.master_addr = "{host}-ib";
  for (const char* name : {"pernode", "nested-outer"}) {
    for (const auto& env : recorded_step(name)) {
      const Env e = after(env, Mode::torchrun, c);
      ASSERT_NE(get(e, "PET_NODE_RANK"), "(unset)") << name;
      EXPECT_EQ(get(e, "PET_NODE_RANK"), get(e, "NODE_RANK"));
      const bool host = get(e, "PET_NODE_RANK") == "0";
      EXPECT_EQ(get(e, "PET_RDZV_CONF"),
                std::string("is_host=") + (host ? "1" : "0") + ",read_timeout=3600,join_timeout=3600");
      EXPECT_EQ(get(e, "PET_LOCAL_ADDR") == get(e, "MASTER_ADDR"), host) << name;
      EXPECT_TRUE(get(e, "PET_LOCAL_ADDR").ends_with("-ib"));
    }
  }
}

// Item 17: the step's reserved port; a reservation inherited from the enclosing step is not used.
TEST(TaskPlan, ReservedPortsAndTheNodeZeroCheck)
{
  EXPECT_EQ(reserved_port("12000-12004"), 12004);
  EXPECT_EQ(reserved_port("12000,12003-12005"), 12005);
  EXPECT_EQ(reserved_port("12000"), 12000);
  EXPECT_EQ(reserved_port(""), std::nullopt);
  EXPECT_EQ(reserved_port("12000-"), std::nullopt);
  EXPECT_EQ(reserved_port("70000"), std::nullopt);
  EXPECT_EQ(reserved_port("[1-2]"), std::nullopt);

  // srun --resv-ports=0 inside the outer task: the inner step sees the outer's reservation, whose
  // port the outer task already uses as MASTER_PORT.
  Env inherited = recorded_step("nested-inner")[0];
  inherited["SLURM_STEP_RESV_PORTS"] = "47419-47420";
  inherited.erase("SLURM_STEP_RESV_PORTS"); // first: no reservation at all
  const std::string computed = get(after(inherited, Mode::automatic), "MASTER_PORT");
  EXPECT_EQ(computed, std::to_string(master_port(DdpConfig{}, 4, 1, 0)));
  inherited["SLURM_STEP_RESV_PORTS"] = "47419-47420";
  EXPECT_EQ(get(after(inherited, Mode::automatic), "MASTER_PORT"), computed);

  // Only node 0's first task checks the port, and only a port stagehand exports.
  auto ranks = recorded_step("n5-uneven");
  int checks = 0;
  for (const auto& env : ranks) {
    auto plan = plan_for(env, Mode::automatic);
    ASSERT_TRUE(plan);
    if (plan->check_port) {
      ++checks;
      EXPECT_EQ(env.at("SLURM_NODEID"), "0");
      EXPECT_EQ(env.at("SLURM_LOCALID"), "0");
      EXPECT_EQ(std::to_string(plan->check_port->port), test::as_map(plan->set)["MASTER_PORT"]);
      EXPECT_EQ(plan->check_port->busy_message,
                "--ddp-env: MASTER_PORT " + std::to_string(plan->check_port->port) +
                  " is already in use on node index 0 (another program holds it); resubmit, or set MASTER_PORT "
                  "yourself; your admin can give every step ports of its own with MpiParams=ports= in slurm.conf");
    }
  }
  EXPECT_EQ(checks, 1);
  Env user_port = ranks[0];
  user_port["MASTER_PORT"] = "29555";
  EXPECT_FALSE(plan_for(user_port, Mode::automatic)->check_port);
  auto reserved = plan_for(recorded_step("nested-outer")[0], Mode::automatic);
  ASSERT_TRUE(reserved && reserved->check_port);
  EXPECT_EQ(reserved->check_port->port, 47420);
  EXPECT_NE(reserved->check_port->busy_message.find("node1"), std::string::npos);
  EXPECT_NE(reserved->check_port->busy_message.find("Slurm reserved it"), std::string::npos);
  EXPECT_TRUE(reserved->check_port->fatal);
  // A step that did not ask (an srun inside an --ddp-env task) is never failed over it: a warning.
  auto inherited_step = plan_for(recorded_step("nested-inner")[0], std::nullopt);
  ASSERT_TRUE(inherited_step && inherited_step->check_port);
  EXPECT_FALSE(inherited_step->check_port->fatal);
}

// Item 18: one line per node, from its first task.
TEST(TaskPlan, WarnsWhenTasksOutnumberGpusOrTorchrunLacksCpus)
{
  std::vector<std::string> lines;
  for (Env env : recorded_step("n5-uneven")) { // 4 tasks on node 0, 1 on node 1
    env["CUDA_VISIBLE_DEVICES"] = "0,1";
    auto plan = plan_for(env, Mode::automatic);
    ASSERT_TRUE(plan);
    lines.insert(lines.end(), plan->warnings.begin(), plan->warnings.end());
  }
  ASSERT_EQ(lines.size(), 1U);
  EXPECT_EQ(lines[0], "--ddp-env: node index 0: 4 tasks (LOCAL_WORLD_SIZE) but 2 GPUs (CUDA_VISIBLE_DEVICES): "
                      "tasks will share a GPU, which NCCL refuses; ask for one GPU per task (--gpus-per-task=1) or "
                      "as many GPUs per node as tasks per node");
  // --gpus-per-task=1: each task sees its own GPU, Slurm counts 4 on the node.
  Env bound = recorded_step("n5-uneven")[0];
  bound["CUDA_VISIBLE_DEVICES"] = "3";
  bound["SLURM_GPUS_ON_NODE"] = "4";
  EXPECT_TRUE(plan_for(bound, Mode::automatic)->warnings.empty());
  EXPECT_TRUE(plan_for(recorded_step("n5-uneven")[0], Mode::automatic)->warnings.empty()); // no GPUs

  Env torchrun = recorded_step("pernode")[0];
  torchrun["CUDA_VISIBLE_DEVICES"] = "0,1";
  torchrun["SLURM_CPUS_PER_TASK"] = "1";
  auto w = plan_for(torchrun, Mode::torchrun)->warnings;
  ASSERT_EQ(w.size(), 1U);
  EXPECT_EQ(w[0], "--ddp-env: node index 0: torchrun will start 2 workers (PET_NPROC_PER_NODE) on 1 CPU; ask "
                  "for at least one CPU per worker (srun --cpus-per-task=2)");
  EXPECT_TRUE(plan_for(torchrun, Mode::automatic)->warnings.empty()) << "auto: the task may not be torchrun";
  torchrun["PET_NPROC_PER_NODE"] = "1"; // the user's own
  EXPECT_TRUE(plan_for(torchrun, Mode::torchrun)->warnings.empty());
  torchrun.erase("PET_NPROC_PER_NODE");
  torchrun["SLURM_CPUS_PER_TASK"] = "2";
  EXPECT_TRUE(plan_for(torchrun, Mode::torchrun)->warnings.empty());
}

TEST(TaskPlan, MarkerCarriesTheJobId)
{
  EXPECT_EQ(marker_job_id("4;MASTER_ADDR:0f4e2874"), 4U);
  EXPECT_EQ(marker_job_id("MASTER_ADDR:0f4e2874"), std::nullopt); // written before the job id was
  EXPECT_EQ(marker_job_id("x;MASTER_ADDR:0f4e2874"), std::nullopt);
}
