// The CLI's commands, one function each (admin.cpp: config, hooks, gc; query.cpp: the daemon;
// stage_out.cpp: stage-out retry).
#pragma once

#include "stagehand/config/config.hpp"

#include <optional>
#include <string>
#include <vector>

namespace stagehand::cli {

struct CommonArgs
{
  std::string config_path{k_default_config_path};
  std::string node;
  bool dry_run = false;
  bool json = false;
  bool all = false;
  std::vector<std::string> positional;
};

// Parses --config, --node, --dry-run, --json, --all and positionals; the node defaults to
// $SLURMD_NODENAME, else the short host name. Logs and returns nullopt on a bad argument.
std::optional<CommonArgs> parse_common(const std::vector<std::string>& args);

enum class Hook { prolog, epilog };

int cmd_check_config(const std::vector<std::string>& args);
int cmd_job_script(const std::vector<std::string>& args, Hook hook);
int cmd_gc(const std::vector<std::string>& args);
int cmd_status(const std::vector<std::string>& args);
int cmd_cache(const std::vector<std::string>& args);
int cmd_stage_out(const std::vector<std::string>& args);

} // namespace stagehand::cli
