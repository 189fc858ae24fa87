// Option table, option callbacks and plugstack arguments.
#include "plugin.hpp"

#include "stagehand/stage/spec.hpp"
#include "stagehand/stageout/spec.hpp"
#include "stagehand/util/escape.hpp"
#include "stagehand/util/strings.hpp"

#include <cstdlib>
#include <cstring>

namespace stagehand::plugin {

namespace detail {

enum OptionVal : int { k_opt_tmpdir = 1, k_opt_ddp_env = 2, k_opt_stage_data = 3, k_opt_stage_out = 4 };

// In srun inside a job, Slurm passes the job's --stage-data and --stage-out (from
// SLURM_SPANK__SLURM_SPANK_OPTION_stagehand_<option>) to the option callback like a value the user
// typed. That value is the job's own (staged already; copied by the job's epilog): a step's own
// --stage-data stages only its own sources on top. (sbatch in a job takes it as Slurm means it: an
// option given.)
bool inherited(const char* optarg, int remote, const char* option_env)
{
  const char* job_value = std::getenv(option_env);
  return remote == 0 && spank_context() == S_CTX_LOCAL && optarg && job_value && std::getenv("SLURM_JOB_ID") &&
         std::strcmp(optarg, job_value) == 0;
}

int on_option(int val, const char* optarg, int remote)
{
  try {
    if (val == k_opt_tmpdir) {
      auto r = tmpdir::parse_option(optarg);
      if (!r) {
        slurm_error("stagehand: %s", escape_control(r.error().message).c_str());
        return -1;
      }
      options().tmpdir = *r;
    } else if (val == k_opt_ddp_env) {
      auto r = ddp::parse_mode(optarg);
      if (!r) {
        slurm_error("stagehand: %s", escape_control(r.error().message).c_str());
        return -1;
      }
      options().ddp_env = *r;
    } else if (val == k_opt_stage_data) {
      auto r = stage::parse_stage_option(optarg ? optarg : "");
      if (!r) {
        slurm_error("stagehand: %s", escape_control(r.error().message).c_str());
        return -1;
      }
      if (inherited(optarg, remote, "SLURM_SPANK__SLURM_SPANK_OPTION_stagehand_stage_data")) {
        return 0;
      }
      // Each --stage-data adds up (one per #SBATCH line, then the command line, in Slurm's order);
      // identical specs count once (check_sources). Slurm itself forwards only the last value:
      // submit_init_post_opt forwards the whole list.
      std::string& all = options().stage_data ? *options().stage_data : options().stage_data.emplace();
      append_joined(all, ",", optarg);
      if (!options().tmpdir) {
        options().tmpdir = tmpdir::Request::create; // --stage-data implies --tmpdir
      }
    } else if (val == k_opt_stage_out) {
      auto r = stageout::parse_option(optarg ? optarg : "");
      if (!r) {
        slurm_error("stagehand: %s", escape_control(r.error().message).c_str());
        return -1;
      }
      if (inherited(optarg, remote, "SLURM_SPANK__SLURM_SPANK_OPTION_stagehand_stage_out")) {
        return 0;
      }
      // Several --stage-out add up like --stage-data (Slurm forwards only the last value: the
      // submit check hands the whole list to the epilog).
      std::string& all = options().stage_out ? *options().stage_out : options().stage_out.emplace();
      append_joined(all, ",", optarg);
      if (!options().tmpdir) {
        options().tmpdir = tmpdir::Request::create; // --stage-out implies --tmpdir
      }
    }
    return 0;
  } catch (...) {
    return -1;
  }
}

char k_name_tmpdir[] = "tmpdir";
char k_arg_tmpdir[] = "keep";
char k_usage_tmpdir[] =
  "Private per-job scratch directory on each node's local disk, exported as SLURM_TMPDIR and "
  "TMPDIR, removed when the job ends (=keep: kept for a while) [stagehand]";
char k_name_stage_data[] = "stage-data";
char k_arg_stage_data[] = "SRC[:DEST][,...]";
char k_usage_stage_data[] =
  "Copy files and directories, or unpack archives (tar, tar.gz/bz2/xz/zst, zip), into SLURM_TMPDIR on every node "
  "before the job's first task there (implies --tmpdir; SRC:DEST:copy keeps an archive packed; repeatable, all "
  "add up; ~/ expands; \\, and \\: escape a comma or colon) [stagehand]";
char k_name_stage_out[] = "stage-out";
char k_arg_stage_out[] = "SRC[:DEST][,...]";
char k_usage_stage_out[] =
  "When the job ends on a node (also cancelled or at its time limit), copy SRC (relative to SLURM_TMPDIR: file, "
  "directory or glob) to DEST (relative to the submit directory or absolute; %j job id, %n node name; default SRC "
  "there), as you, before the directory is removed; only the first node copies unless DEST has %n (implies --tmpdir; "
  "repeatable, all add up) [stagehand]";
char k_name_ddp_env[] = "ddp-env";
char k_arg_ddp_env[] = "auto|tasks|torchrun";
char k_usage_ddp_env[] =
  "Export PyTorch's distributed environment (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK, LOCAL_RANK, ..., "
  "and torchrun's PET_*) to every task; never overrides a variable you set [stagehand]";

} // namespace detail

using namespace detail;

Options& options()
{
  static Options o;
  return o;
}

void recover_options_from_env(const std::function<std::optional<std::string>(const std::string&)>& env)
{
  const std::pair<int, const char*> options_env[] = {
    {k_opt_tmpdir, "SLURM_SPANK__SLURM_SPANK_OPTION_stagehand_tmpdir"},
    {k_opt_ddp_env, "SLURM_SPANK__SLURM_SPANK_OPTION_stagehand_ddp_env"},
    {k_opt_stage_data, "SLURM_SPANK__SLURM_SPANK_OPTION_stagehand_stage_data"},
    {k_opt_stage_out, "SLURM_SPANK__SLURM_SPANK_OPTION_stagehand_stage_out"},
  };
  for (const auto& [val, name] : options_env) {
    const bool given = val == k_opt_tmpdir       ? options().tmpdir.has_value()
                       : val == k_opt_ddp_env    ? options().ddp_env.has_value()
                       : val == k_opt_stage_data ? options().stage_data.has_value()
                                                 : options().stage_out.has_value();
    if (given) {
      continue;
    }
    if (auto value = env(name)) {
      on_option(val, value->c_str(), 1); // a bad value was refused by sbatch already
    }
  }
}

Result<Args> parse_args(int ac, char** av)
{
  Args args;
  for (int i = 0; i < ac; ++i) {
    std::string_view a = av[i];
    if (a.starts_with("helper=")) {
      args.helper_path = std::string(a.substr(7));
      if (args.helper_path.empty() || args.helper_path[0] != '/') {
        return Error::config("plugstack.conf: helper= needs an absolute path, got \"" + args.helper_path + "\"");
      }
    } else if (a.starts_with("config=")) {
      args.config_path = std::string(a.substr(7));
      if (args.config_path.empty() || args.config_path[0] != '/') {
        return Error::config("plugstack.conf: config= needs an absolute path, got \"" + args.config_path + "\"");
      }
    } else {
      return Error::config("plugstack.conf: unknown argument \"" + std::string(a) +
                            "\" (expected config=PATH or helper=PATH)");
    }
  }
  return args;
}

Result<Config> load(int ac, char** av)
{
  auto args = parse_args(ac, av);
  if (!args) {
    return args.error();
  }
  return load_config(args->config_path, OwnerCheck::require_root_owned);
}

} // namespace stagehand::plugin

// Read by Slurm in srun, slurmstepd and the prolog/epilog (sbatch/salloc use spank_option_register).
extern "C" {
__attribute__((visibility("default"))) struct spank_option spank_options[] = {
  {stagehand::plugin::detail::k_name_tmpdir, stagehand::plugin::detail::k_arg_tmpdir, stagehand::plugin::detail::k_usage_tmpdir, 2,
   stagehand::plugin::detail::k_opt_tmpdir, stagehand::plugin::detail::on_option},
  {stagehand::plugin::detail::k_name_ddp_env, stagehand::plugin::detail::k_arg_ddp_env,
   stagehand::plugin::detail::k_usage_ddp_env, 2, stagehand::plugin::detail::k_opt_ddp_env,
   stagehand::plugin::detail::on_option},
  {stagehand::plugin::detail::k_name_stage_data, stagehand::plugin::detail::k_arg_stage_data,
   stagehand::plugin::detail::k_usage_stage_data, 1, stagehand::plugin::detail::k_opt_stage_data,
   stagehand::plugin::detail::on_option},
  {stagehand::plugin::detail::k_name_stage_out, stagehand::plugin::detail::k_arg_stage_out,
   stagehand::plugin::detail::k_usage_stage_out, 1, stagehand::plugin::detail::k_opt_stage_out,
   stagehand::plugin::detail::on_option},
  SPANK_OPTIONS_TABLE_END,
};
}
