// DDP environment: ports, layouts from recorded srun environments (through the plugin's builder),
// modes, never-overwrite.
#include "stagehand/ddp/env.hpp"
#include "stagehand/ddp/step_layout.hpp"
#include "step_env.hpp"

#include <gtest/gtest.h>

#include <set>

using namespace stagehand;
using namespace stagehand::ddp;

namespace {

using test::Env;
using test::as_map;
using test::recorded_step;

// A recorded task's layout, through the builder the plugin uses (over an environment lookup).
Result<StepLayout> layout_of(const Env& env) { return build_step_layout(test::recorded_lookup(env)); }

} // namespace

TEST(MasterPort, DeterministicInRangeAndDistinctPerStep)
{
  DdpConfig c;
  for (std::uint32_t job = 1; job < 2000; ++job) {
    int p0 = master_port(c, job, 0, 0);
    EXPECT_EQ(p0, master_port(c, job, 0, 0));
    EXPECT_GE(p0, c.port_min);
    EXPECT_LE(p0, c.port_max);
    std::set<int> steps;
    for (std::uint32_t step = 0; step < 64; ++step) {
      steps.insert(master_port(c, job, step, 0));
    }
    EXPECT_EQ(steps.size(), 64U) << "steps of job " << job << " share a port";
  }
  EXPECT_NE(master_port(c, 7, 0, 0), master_port(c, 7, 0, 1)) << "a requeue should move the port";
  c.port_min = c.port_max = 29500;
  EXPECT_EQ(master_port(c, 123, 4, 5), 29500);
}

TEST(MasterPort, SpreadsJobsOverTheRange)
{
  DdpConfig c;
  std::set<int> ports;
  for (std::uint32_t job = 1000; job < 1100; ++job) {
    ports.insert(master_port(c, job, 0, 0));
  }
  EXPECT_GT(ports.size(), 95U); // ~100 jobs in 12,768 ports: collisions are rare
}

TEST(TasksPerNode, SlurmCompressedForm)
{
  EXPECT_EQ(*parse_tasks_per_node("2(x3),1"), (std::vector<std::uint32_t>{2, 2, 2, 1}));
  EXPECT_EQ(*parse_tasks_per_node("4"), (std::vector<std::uint32_t>{4}));
  EXPECT_EQ(*parse_tasks_per_node("3,1"), (std::vector<std::uint32_t>{3, 1}));
  EXPECT_FALSE(parse_tasks_per_node(""));
  EXPECT_FALSE(parse_tasks_per_node("2(x"));
  EXPECT_FALSE(parse_tasks_per_node("x,1"));
}

// Every recorded step: ranks, local ranks and per-node sizes are consistent and match Slurm's.
TEST(Layout, RecordedStepsGiveConsistentEnvironments)
{
  DdpConfig c;
  for (const char* name : {"n3-block", "n4-cyclic", "n5-uneven", "pernode"}) {
    auto ranks = recorded_step(name);
    ASSERT_FALSE(ranks.empty()) << name;
    std::map<std::string, std::set<std::string>> local_ranks_by_node;
    std::set<std::string> ports;
    for (const auto& env : ranks) {
      auto layout = layout_of(env);
      ASSERT_TRUE(layout) << name << ": " << layout.error().message;
      auto vars = compute_environment(c, *layout, Mode::tasks);
      ASSERT_TRUE(vars);
      auto m = as_map(*vars);
      EXPECT_EQ(m["RANK"], env.at("SLURM_PROCID")) << name;
      EXPECT_EQ(m["LOCAL_RANK"], env.at("SLURM_LOCALID")) << name;
      EXPECT_EQ(m["NODE_RANK"], env.at("SLURM_NODEID")) << name;
      EXPECT_EQ(m["WORLD_SIZE"], std::to_string(ranks.size())) << name;
      EXPECT_EQ(m["NNODES"], env.at("SLURM_STEP_NUM_NODES")) << name;
      EXPECT_EQ(m["MASTER_ADDR"], "node1") << name;
      local_ranks_by_node[m["NODE_RANK"]].insert(m["LOCAL_RANK"]);
      ports.insert(m["MASTER_PORT"]);
      // LOCAL_WORLD_SIZE is the true count of this step's tasks on this node.
      int on_node = 0;
      for (const auto& other : ranks) {
        on_node += other.at("SLURM_NODEID") == env.at("SLURM_NODEID");
      }
      EXPECT_EQ(m["LOCAL_WORLD_SIZE"], std::to_string(on_node)) << name;
    }
    EXPECT_EQ(ports.size(), 1U) << name << ": ranks disagree on MASTER_PORT";
    for (const auto& [node, locals] : local_ranks_by_node) {
      for (std::size_t i = 0; i < locals.size(); ++i) {
        EXPECT_TRUE(locals.count(std::to_string(i))) << name << " node " << node;
      }
    }
  }
}

TEST(Layout, CyclicRankOneIsOnTheSecondNode)
{
  auto ranks = recorded_step("n4-cyclic");
  ASSERT_EQ(ranks.size(), 4U);
  auto m = as_map(*compute_environment(DdpConfig{}, *layout_of(ranks[1]), Mode::tasks));
  EXPECT_EQ(m["NODE_RANK"], "1");
  EXPECT_EQ(m["LOCAL_RANK"], "0");
  EXPECT_EQ(m["LOCAL_WORLD_SIZE"], "1");
}

TEST(Layout, BuilderReadsGpusBatchStepAndRefusesAMissingItem)
{
  Env env = recorded_step("pernode")[0];
  env["CUDA_VISIBLE_DEVICES"] = "0,1,2";
  EXPECT_EQ(layout_of(env)->gpus_on_node, 3U);
  env["SLURM_GPUS_ON_NODE"] = "8"; // Slurm's own count wins
  EXPECT_EQ(layout_of(env)->gpus_on_node, 8U);

  Env batch{{"SLURM_JOB_ID", "9"}, {"SLURM_STEP_ID", std::to_string(k_batch_step_id)},
            {"SLURM_JOB_NODELIST", "gpu[07-08]"}};
  auto b = layout_of(batch);
  ASSERT_TRUE(b) << b.error().message;
  EXPECT_TRUE(b->batch_step());
  EXPECT_TRUE(b->job_level());
  EXPECT_EQ(b->node_list, "gpu[07-08]");
  EXPECT_EQ(b->nnodes, 2U);

  Env broken = recorded_step("n3-block")[0];
  broken.erase("SLURM_LOCALID");
  auto r = layout_of(broken);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().message, "cannot read the step's task layout (local task id)");
  EXPECT_EQ(r.error().kind, ErrorKind::internal);
  broken = recorded_step("n3-block")[0];
  broken.erase("SLURM_STEP_NODELIST");
  EXPECT_EQ(layout_of(broken).error().message, "SLURM_STEP_NODELIST is not set");
}

TEST(Modes, AutoAddsTorchrunSetOnlyWithOneTaskPerNode)
{
  DdpConfig c;
  c.master_addr = "{host}-ib";
  auto per_node = layout_of(recorded_step("pernode")[1]);
  ASSERT_TRUE(per_node);
  auto m = as_map(*compute_environment(c, *per_node, Mode::automatic));
  EXPECT_EQ(m["MASTER_ADDR"], "node1-ib");
  EXPECT_EQ(m["PET_NNODES"], "2");
  EXPECT_EQ(m["PET_NODE_RANK"], "1");
  EXPECT_EQ(m["PET_NPROC_PER_NODE"], "1");
  EXPECT_EQ(m["PET_RDZV_BACKEND"], "c10d");
  EXPECT_EQ(m["PET_RDZV_ENDPOINT"], "node1-ib:" + m["MASTER_PORT"]);
  EXPECT_EQ(m["PET_RDZV_CONF"], "is_host=0,read_timeout=3600,join_timeout=3600");
  EXPECT_EQ(m["PET_LOCAL_ADDR"], "node2-ib"); // this node's name through the template
  EXPECT_EQ(m["RANK"], "1");
  auto rank0 = as_map(*compute_environment(c, *layout_of(recorded_step("pernode")[0]), Mode::automatic));
  EXPECT_EQ(rank0["PET_RDZV_CONF"], "is_host=1,read_timeout=3600,join_timeout=3600");
  EXPECT_EQ(rank0["PET_LOCAL_ADDR"], rank0["MASTER_ADDR"]);

  auto block = layout_of(recorded_step("n3-block")[0]);
  auto b = as_map(*compute_environment(c, *block, Mode::automatic));
  EXPECT_EQ(b.count("PET_NNODES"), 0U);
  EXPECT_EQ(b["WORLD_SIZE"], "3");

  auto t = as_map(*compute_environment(c, *per_node, Mode::torchrun));
  EXPECT_EQ(t.count("RANK"), 0U);
  EXPECT_EQ(t.count("WORLD_SIZE"), 0U);
  EXPECT_EQ(t["PET_NNODES"], "2");
  for (const auto& [name, value] : t) {
    EXPECT_NE(name.rfind("TORCHELASTIC_", 0), 0U) << name;
  }
  StepLayout gpus = *per_node;
  gpus.gpus_on_node = 8;
  EXPECT_EQ(as_map(*compute_environment(c, gpus, Mode::torchrun))["PET_NPROC_PER_NODE"], "8");
}

// Item 15: several torchruns on one node would each start the node's workers and all of node 0's
// would host the store ("Address already in use"): refused, whatever the node.
TEST(Modes, TorchrunModeRefusesMoreThanOneTaskPerNode)
{
  for (const char* name : {"n3-block", "n4-cyclic", "n5-uneven"}) {
    for (const auto& env : recorded_step(name)) {
      auto layout = layout_of(env);
      ASSERT_TRUE(layout);
      auto r = compute_environment(DdpConfig{}, *layout, Mode::torchrun);
      ASSERT_FALSE(r) << name << " rank " << env.at("SLURM_PROCID");
      EXPECT_EQ(r.error().kind, ErrorKind::refused);
      EXPECT_EQ(r.error().message, "--ddp-env=torchrun: this step has " + env.at("SLURM_STEP_NUM_TASKS") +
                                     " tasks on 2 nodes; torchrun starts the workers itself, so start one "
                                     "torchrun per node (srun --ntasks-per-node=1)");
    }
  }
}

TEST(Modes, BatchStepGetsJobLevelValuesAndNoRank)
{
  StepLayout batch;
  batch.job_id = 9;
  batch.kind = StepKind::job_level;
  batch.step_id = k_batch_step_id;
  batch.node_list = "gpu[07-08]";
  batch.nnodes = 2;
  auto m = as_map(*compute_environment(DdpConfig{}, batch, Mode::automatic));
  EXPECT_EQ(m, (std::map<std::string, std::string>{{"MASTER_ADDR", "gpu07"}, {"NNODES", "2"}}));
}

TEST(Modes, SiteDefaultsFollowTheComputedValues)
{
  DdpConfig c;
  c.env = {{"NCCL_SOCKET_IFNAME", "ib0"}};
  auto vars = *compute_environment(c, *layout_of(recorded_step("n3-block")[0]), Mode::tasks);
  EXPECT_EQ(vars.back(), (EnvVar{"NCCL_SOCKET_IFNAME", "ib0"}));
}

TEST(ModeOption, Values)
{
  EXPECT_EQ(*parse_mode(nullptr), Mode::automatic);
  EXPECT_EQ(*parse_mode("(null)"), Mode::automatic);
  EXPECT_EQ(*parse_mode("auto"), Mode::automatic);
  EXPECT_EQ(*parse_mode("tasks"), Mode::tasks);
  EXPECT_EQ(*parse_mode("torchrun"), Mode::torchrun);
  EXPECT_EQ(parse_mode("mpi").error().message, "--ddp-env: unknown value \"mpi\" (expected auto, tasks or torchrun)");
}

TEST(PlanExports, NeverOverwritesTheUsersValues)
{
  std::vector<EnvVar> wanted{{"MASTER_ADDR", "node1"}, {"MASTER_PORT", "23000"}, {"NCCL_DEBUG", "WARN"}};
  Env task{{"MASTER_PORT", "29500"}, {"NCCL_DEBUG", "INFO"}}; // set by the user
  auto plan = plan_exports(wanted, [&](const std::string& n) -> std::optional<std::string> {
    auto it = task.find(n);
    return it == task.end() ? std::nullopt : std::optional(it->second);
  });
  ASSERT_EQ(plan.set.size(), 1U);
  EXPECT_EQ(plan.set[0].name, "MASTER_ADDR");
}

TEST(PlanExports, AStepReplacesWhatTheBatchScriptGotFromStagehand)
{
  // The batch step exported MASTER_ADDR and NNODES; srun copies them into the step's tasks.
  auto batch = plan_exports({{"MASTER_ADDR", "node1"}, {"NNODES", "2"}},
                            [](const std::string&) { return std::nullopt; });
  Env task{{"MASTER_ADDR", "node1"}, {"NNODES", "2"}, {k_marker_env, batch.marker}};
  auto lookup = [&](const std::string& n) -> std::optional<std::string> {
    auto it = task.find(n);
    return it == task.end() ? std::nullopt : std::optional(it->second);
  };
  auto step = plan_exports({{"MASTER_ADDR", "node2"}, {"NNODES", "1"}}, lookup);
  EXPECT_EQ(step.set.size(), 2U);
  // But if the script changed one of them, that one is the user's now.
  task["NNODES"] = "5";
  step = plan_exports({{"MASTER_ADDR", "node2"}, {"NNODES", "1"}}, lookup);
  ASSERT_EQ(step.set.size(), 1U);
  EXPECT_EQ(step.set[0].name, "MASTER_ADDR");
}
