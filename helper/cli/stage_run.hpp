// `stagehand stage-run`: staging on one node, run by the job's task as the job user.
#pragma once

#include <string>
#include <vector>

namespace stagehand::cli {

int stage_run(const std::vector<std::string>& args);

} // namespace stagehand::cli
