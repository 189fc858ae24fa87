// stagehand: the command line for admins and users (check-config, prolog/epilog, gc, status,
// cache, stage-out retry) and the internal stage-run the plugin starts in a job's task.
#include "commands.hpp"
#include "stage_run.hpp"

#include "common/log_format.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <string>
#include <vector>

using namespace stagehand;

namespace {

constexpr const char* k_usage = R"(usage: stagehand COMMAND [ARGS]

Commands:
  status [--json]            what is on this node: jobs, cache, cleanup backlog, stage-out results
                             kept after a failed copy (a user sees only their own jobs; without
                             stagehandd, only the kept results)
  stage-out retry JOBID      copy a job's kept --stage-out results again, then remove them (root,
                             or the job's user; without stagehandd the user's copy leaves them
                             on the node until keep_for)
  cache ls [--json]          cache entries (a user sees those their jobs used)
  cache evict SOURCE|--all   remove cache entries (root)
  gc [--dry-run]             remove trash, expired kept directories and directories of jobs that
                             no longer run on this node (root; through stagehandd when it runs)
  check-config FILE          validate a stagehand.toml (keys, types, values, ownership)
  prolog                     job start on this node, for slurm.conf Prolog= (reads SLURM_JOB_ID,
                             SLURM_JOB_UID, SLURMD_NODENAME from slurmd's environment)
  epilog                     job end on this node, for slurm.conf Epilog=
  stage-run ...              internal: --stage-data on one node, run by the job's task

Every command takes --config FILE (default /etc/slurm/stagehand.toml) and --node NAME (default
$SLURMD_NODENAME, else the short host name).
)";

} // namespace

int main(int argc, char** argv)
{
  auto logger = spdlog::stderr_color_st("stagehand");
  helper::set_escaping_pattern(*logger, "stagehand: %^%l%$: %v");
  spdlog::set_default_logger(logger);
  try {
    if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
      std::fputs(k_usage, argc < 2 ? stderr : stdout);
      return argc < 2 ? 2 : 0;
    }
    std::string cmd = argv[1];
    std::vector<std::string> args(argv + 2, argv + argc);
    if (cmd == "check-config") {
      return cli::cmd_check_config(args);
    }
    if (cmd == "prolog" || cmd == "epilog") {
      return cli::cmd_job_script(args, cmd == "prolog" ? cli::Hook::prolog : cli::Hook::epilog);
    }
    if (cmd == "gc") {
      return cli::cmd_gc(args);
    }
    if (cmd == "status") {
      return cli::cmd_status(args);
    }
    if (cmd == "cache") {
      return cli::cmd_cache(args);
    }
    if (cmd == "stage-out") {
      return cli::cmd_stage_out(args);
    }
    if (cmd == "stage-run") {
      return cli::stage_run(args);
    }
    spdlog::error("unknown command \"{}\" (see stagehand --help)", cmd);
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("internal error: {}", e.what());
    return 1;
  }
}
