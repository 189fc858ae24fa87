// Reading the recorded step environments.
#include "step_env.hpp"

#include <filesystem>
#include <fstream>

namespace stagehand::test {

Env read_env_file(const std::string& path)
{
  Env env;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    if (auto eq = line.find('='); eq != std::string::npos) {
      env[line.substr(0, eq)] = line.substr(eq + 1);
    }
  }
  return env;
}

std::vector<Env> recorded_step(const std::string& name)
{
  std::vector<Env> ranks;
  for (int r = 0;; ++r) {
    auto p = std::filesystem::path(STAGEHAND_TEST_DATA) / "step_env" / (name + ".rank" + std::to_string(r) + ".env");
    if (!std::filesystem::exists(p)) {
      break;
    }
    ranks.push_back(read_env_file(p));
  }
  return ranks;
}

ddp::StepLookup recorded_lookup(const Env& env)
{
  return ddp::env_step_lookup([env](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional(it->second);
  });
}

Env apply(Env env, const std::vector<std::string>& unset, const std::vector<ddp::EnvVar>& set)
{
  for (const auto& name : unset) {
    env.erase(name);
  }
  for (const auto& v : set) {
    env[v.name] = v.value;
  }
  return env;
}

std::map<std::string, std::string> as_map(const std::vector<ddp::EnvVar>& vars)
{
  std::map<std::string, std::string> m;
  for (const auto& v : vars) {
    m[v.name] = v.value;
  }
  return m;
}

} // namespace stagehand::test
