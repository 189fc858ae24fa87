// Recorded step environments (tests/unit/data/step_env/PREFIX.rankN.env): what a task of a real
// srun on the test cluster had in its environment when task_init ran, and, on lines "@ITEM=N",
// the spank items slurmstepd gave it (recorded for steps where the two differ).
#pragma once

#include "stagehand/ddp/env.hpp"
#include "stagehand/ddp/step_layout.hpp"

#include <map>
#include <string>
#include <vector>

namespace stagehand::test {

using Env = std::map<std::string, std::string>;

Env read_env_file(const std::string& path);

// All ranks of one recorded step ("n4-cyclic"), by rank.
std::vector<Env> recorded_step(const std::string& name);

// The recorded task through ddp::env_step_lookup: its recorded spank items where the file has
// them, else the items derived from its environment.
ddp::StepLookup recorded_lookup(const Env& env);

// The environment after a task applied `unset` then `set`.
Env apply(Env env, const std::vector<std::string>& unset, const std::vector<ddp::EnvVar>& set);

std::map<std::string, std::string> as_map(const std::vector<ddp::EnvVar>& vars);

} // namespace stagehand::test
