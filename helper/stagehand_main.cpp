// stagehand: the admin's command line (check-config, prolog/epilog scripts, gc).
#include "stage_run.hpp"
#include "stagehand/config/config.hpp"
#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/tmpdir/lifecycle.hpp"
#include "stagehand/util/units.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <pwd.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <optional>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>
#include <vector>

using namespace stagehand;

namespace {

constexpr const char* k_usage = R"(usage: stagehand COMMAND [ARGS]

Commands:
  check-config FILE        validate a stagehand.toml (keys, types, values, ownership)
  prolog [--config FILE]   job start on this node, for slurm.conf Prolog= (reads SLURM_JOB_ID,
                           SLURM_JOB_UID, SLURMD_NODENAME from slurmd's environment)
  epilog [--config FILE]   job end on this node, for slurm.conf Epilog=
  gc [--dry-run] [--config FILE] [--node NAME]
                           remove kept scratch directories whose keep_for has passed
  stage-run ...             internal: --stage-data on one node, run by the job's task
  status [--json]          (needs stagehandd, not in this version)
  cache ls|evict           (needs stagehandd, not in this version)

Config: --config FILE, default /etc/slurm/stagehand.toml.
)";

struct CommonArgs
{
  std::string config_path{k_default_config_path};
  std::string node;
  bool dry_run = false;
};

bool parse_common(const std::vector<std::string>& args, CommonArgs& out)
{
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    if ((a == "--config" || a == "--node") && i + 1 < args.size()) {
      (a == "--config" ? out.config_path : out.node) = args[++i];
    } else if (a == "--dry-run") {
      out.dry_run = true;
    } else {
      spdlog::error("unknown argument \"{}\"", a);
      return false;
    }
  }
  return true;
}

std::optional<std::uint32_t> env_u32(const char* name)
{
  const char* v = std::getenv(name);
  return v ? parse_u32(v) : std::nullopt;
}

int cmd_check_config(const std::vector<std::string>& args)
{
  if (args.size() != 1) {
    spdlog::error("usage: stagehand check-config FILE");
    return 2;
  }
  auto config = load_config(args[0], OwnerCheck::require_root_owned);
  if (!config) {
    spdlog::error("{}", config.error().message);
    return 1;
  }
  std::printf("%s: ok\n", args[0].c_str());
  std::printf("  [tmpdir] base=%s default=%s export_tmpdir=%s keep_for=%llds\n", config->tmpdir.base.c_str(),
              config->tmpdir.by_default ? "true" : "false", config->tmpdir.export_tmpdir ? "true" : "false",
              static_cast<long long>(config->tmpdir.keep_for.count()));
  std::printf("  [ddp] port_min=%d port_max=%d master_addr=%s\n", config->ddp.port_min, config->ddp.port_max,
              config->ddp.master_addr.c_str());
  return 0;
}

// Prolog/epilog scripts always exit 0: a non-zero exit drains the node. Problems go to stderr,
// which slurmd logs.
int cmd_job_script(const std::vector<std::string>& args, bool start)
{
  const char* what = start ? "prolog" : "epilog";
  CommonArgs common;
  if (!parse_common(args, common)) {
    return 2;
  }
  auto job_id = env_u32("SLURM_JOB_ID");
  auto uid = env_u32("SLURM_JOB_UID");
  const char* node = std::getenv("SLURMD_NODENAME");
  if (!job_id || !uid || !node) {
    spdlog::error("{}: SLURM_JOB_ID, SLURM_JOB_UID and SLURMD_NODENAME must be set (run from slurm.conf {}=)",
                  what, start ? "Prolog" : "Epilog");
    return 0;
  }
  tmpdir::JobContext job;
  job.owner.job_id = *job_id;
  job.owner.uid = *uid;
  if (auto gid = env_u32("SLURM_JOB_GID")) {
    job.owner.gid = *gid;
  } else if (const struct passwd* pw = ::getpwuid(*uid)) {
    job.owner.gid = pw->pw_gid;
  } else {
    spdlog::error("{}: job {}: SLURM_JOB_GID unset and uid {} unknown", what, *job_id, *uid);
    return 0;
  }
  job.node = node;
  auto config = load_config(common.config_path, OwnerCheck::require_root_owned);
  if (!config) {
    spdlog::error("{}: job {}: {}", what, *job_id, config.error().message);
    return 0;
  }
  std::optional<tmpdir::Request> option;
  if (const char* v = std::getenv(tmpdir::k_job_script_option_env)) {
    if (auto r = tmpdir::parse_option(v)) {
      option = *r;
    }
  }
  auto done = start ? tmpdir::on_job_start(*config, job)
                    : tmpdir::on_job_end(*config, job, tmpdir::effective_request(*config, option));
  if (!done) {
    spdlog::error("{}: job {}: {}", what, *job_id, done.error().message);
    return 0;
  }
  spdlog::info("{}: job {}: {}", what, *job_id, *done);
  return 0;
}

int cmd_gc(const std::vector<std::string>& args)
{
  CommonArgs common;
  if (!parse_common(args, common)) {
    return 2;
  }
  if (common.node.empty()) {
    const char* env = std::getenv("SLURMD_NODENAME");
    char host[256] = {};
    common.node = env ? env : (::gethostname(host, sizeof host - 1) == 0 ? host : "");
  }
  auto config = load_config(common.config_path, OwnerCheck::require_root_owned);
  if (!config) {
    spdlog::error("{}", config.error().message);
    return 1;
  }
  auto base = tmpdir::base_path(*config, common.node);
  if (!base) {
    spdlog::error("{}", base.error().message);
    return 1;
  }
  auto base_fd = fs::open_trusted_dir(*base, fs::CreateMissing::no);
  if (!base_fd) {
    spdlog::error("{}", base_fd.error().message);
    return 1;
  }
  auto dry = common.dry_run ? tmpdir::DryRun::yes : tmpdir::DryRun::no;
  auto result = tmpdir::remove_expired(base_fd->get(), std::time(nullptr), dry);
  for (const auto& name : result.removed) {
    std::printf("%s %s/%s\n", common.dry_run ? "would remove" : "removed", base->c_str(), name.c_str());
  }
  for (const auto& e : result.errors) {
    spdlog::error("{}: {}", *base, e.message);
  }
  return result.errors.empty() ? 0 : 1;
}

} // namespace

int main(int argc, char** argv)
{
  auto logger = spdlog::stderr_color_st("stagehand");
  logger->set_pattern("stagehand: %^%l%$: %v");
  spdlog::set_default_logger(logger);
  try {
    if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
      std::fputs(k_usage, argc < 2 ? stderr : stdout);
      return argc < 2 ? 2 : 0;
    }
    std::string cmd = argv[1];
    std::vector<std::string> args(argv + 2, argv + argc);
    if (cmd == "check-config") {
      return cmd_check_config(args);
    }
    if (cmd == "prolog" || cmd == "epilog") {
      return cmd_job_script(args, cmd == "prolog");
    }
    if (cmd == "gc") {
      return cmd_gc(args);
    }
    if (cmd == "stage-run") {
      return cli::stage_run(args);
    }
    if (cmd == "status" || cmd == "cache") {
      spdlog::error("'{}' talks to the node daemon stagehandd, which this version does not have yet", cmd);
      return 2;
    }
    spdlog::error("unknown command \"{}\" (see stagehand --help)", cmd);
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("internal error: {}", e.what());
    return 1;
  }
}
