// stagehand-ddp-replay: the environment --ddp-env would export to each task of a recorded step.
//   stagehand-ddp-replay FIXTURE_DIR PREFIX [auto|tasks|torchrun]
// reads FIXTURE_DIR/PREFIX.rank0.env, .rank1.env, ... (the SLURM_* environments of real srun
// tasks, as in tests/unit/data/step_env) and prints, per task, a "# rank N ..." line followed by
// shell `unset` and `export` lines: the plugin's per-task plan (ddp::plan_task), with the default
// [ddp] settings. scripts/gpu-check.sh replays them with PyTorch.
#include "stagehand/ddp/task_plan.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

using namespace stagehand;

namespace {

using Env = std::map<std::string, std::string>;

std::optional<Env> read_env(const std::filesystem::path& path)
{
  std::ifstream f(path);
  if (!f) {
    return std::nullopt;
  }
  Env env;
  std::string line;
  while (std::getline(f, line)) {
    if (auto eq = line.find('='); eq != std::string::npos) {
      env[line.substr(0, eq)] = line.substr(eq + 1);
    }
  }
  return env;
}

std::string shell_quote(const std::string& value)
{
  std::string out = "'";
  for (char c : value) {
    out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  }
  return out + "'";
}

int fail(const std::string& message, int code)
{
  std::fprintf(stderr, "stagehand-ddp-replay: %s\n", message.c_str());
  return code;
}

} // namespace

int main(int argc, char** argv)
{
  if (argc < 3 || argc > 4) {
    return fail("usage: stagehand-ddp-replay FIXTURE_DIR PREFIX [auto|tasks|torchrun]", 2);
  }
  auto mode = ddp::parse_mode(argc == 4 ? argv[3] : nullptr);
  if (!mode) {
    return fail(mode.error().message, 2);
  }
  const std::filesystem::path dir = argv[1];
  const std::string prefix = argv[2];
  const DdpConfig config;
  int rank = 0;
  for (;; ++rank) {
    const auto path = dir / (prefix + ".rank" + std::to_string(rank) + ".env");
    if (!std::filesystem::exists(path)) {
      break;
    }
    auto env = read_env(path);
    if (!env) {
      return fail(path.string() + ": cannot read", 1);
    }
    const auto lookup = [&](const std::string& name) -> std::optional<std::string> {
      auto it = env->find(name);
      return it == env->end() ? std::nullopt : std::optional(it->second);
    };
    const auto step = ddp::env_step_lookup(lookup);
    auto layout = ddp::build_step_layout(step);
    if (!layout) {
      return fail(path.string() + ": " + layout.error().message, 1);
    }
    // The plugin's own decision; the recorded environment is the task's own: what is already
    // there is never overwritten.
    auto plan = ddp::plan_task(config, step, *mode);
    if (!plan) {
      return fail(path.string() + ": " + plan.error().message, 1);
    }
    std::printf("# rank %d (%s): node %u of %u, local task %u of %u\n", rank, path.filename().c_str(),
                layout->node_id, layout->nnodes, layout->local_task_id, layout->local_ntasks);
    for (const auto& name : plan->unset) {
      std::printf("unset %s\n", name.c_str());
    }
    for (const auto& var : plan->set) {
      std::printf("export %s=%s\n", var.name.c_str(), shell_quote(var.value).c_str());
    }
  }
  if (rank == 0) {
    return fail((dir / (prefix + ".rank0.env")).string() + ": no such file", 1);
  }
  return 0;
}
