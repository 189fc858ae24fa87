// stagehandd: the node helper daemon. Not built yet: this version refuses to start, saying so,
// rather than pretend to run. --tmpdir needs no daemon.
#include "stagehand/config/config.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <string>

int main(int argc, char** argv)
{
  auto logger = spdlog::stderr_color_st("stagehandd");
  logger->set_pattern("stagehandd: %^%l%$: %v");
  spdlog::set_default_logger(logger);
  std::string config_path{stagehand::k_default_config_path};
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--config" && i + 1 < argc) {
      config_path = argv[++i];
    } else if (a == "--node" && i + 1 < argc) {
      ++i;
    } else if (a == "--foreground") {
    } else {
      spdlog::error("usage: stagehandd --config FILE [--node NAME] [--foreground]");
      return 2;
    }
  }
  auto config = stagehand::load_config(config_path, stagehand::OwnerCheck::require_root_owned);
  if (!config) {
    spdlog::error("{}", config.error().message);
    return 1;
  }
  spdlog::error("the node daemon is not implemented in this version; --tmpdir works without it");
  return 1;
}
