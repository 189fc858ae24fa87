// sbatch/salloc (allocator) and srun (local): checks at submit time, before anything is queued.
#include "plugin.hpp"

#include "stagehand/job/job_env.hpp"
#include "stagehand/stage/spec.hpp"
#include "stagehand/stageout/spec.hpp"
#include "stagehand/util/escape.hpp"

#include <cstdlib>

#include <unistd.h>

namespace stagehand::plugin {

namespace {

// --stage-out: DESTs checked as the submitting user, then handed to the epilog. A step's srun
// inside an existing job cannot reach the job's epilog: refused there with one line.
int stage_out_at_submit(spank_t sp)
{
  if (spank_context() == S_CTX_LOCAL && ::getenv("SLURM_JOB_ID") != nullptr) {
    // The job's own entries, inherited by every srun in it, never get here (on_option skips them):
    // this is the step's own, which no epilog would copy.
    slurm_error("stagehand: --stage-out: give it to the job (sbatch/salloc, or an srun that starts a job), not to a "
                "step inside job %s",
                ::getenv("SLURM_JOB_ID"));
    return -1;
  }
  auto specs = stageout::parse_option(*options().stage_out);
  char cwd[4096];
  if (!specs || !::getcwd(cwd, sizeof cwd)) {
    slurm_error("stagehand: %s", specs ? "--stage-out: cannot tell the current directory" : escape_control(specs.error().message).c_str());
    return -1;
  }
  const std::string dir = cwd;
  if (dir.find_first_of(",:") != std::string::npos) {
    slurm_error("stagehand: --stage-out: the submit directory %s holds ',' or ':'; submit from another directory",
                cwd);
    return -1;
  }
  if (auto ok = stageout::check_at_submit(*specs, dir); !ok) {
    slurm_error("stagehand: %s", escape_control(ok.error().message).c_str());
    return -1;
  }
  const std::string canonical = stageout::canonical_option(*specs, dir);
  if (spank_job_control_setenv(sp, job::k_stage_out_var, canonical.c_str(), 1) != ESPANK_SUCCESS ||
      spank_job_control_setenv(sp, job::k_stage_out_dir_var, cwd, 1) != ESPANK_SUCCESS) {
    slurm_error("stagehand: --stage-out: cannot hand the entries to the job's epilog");
    return -1;
  }
  return 0;
}

} // namespace

int submit_init_post_opt(spank_t sp, int ac, char** av)
{
  // --stage-data's sources are checked here, as the submitting user, before anything is queued.
  // Option values were already checked by the option callback (a bad value stops sbatch there).
  // The config is read here only when the user asked for something, so a broken config blocks
  // stagehand's own options but never unrelated jobs.
  if (!options().tmpdir && !options().ddp_env && !options().stage_data && !options().stage_out) {
    return 0;
  }
  auto config = load(ac, av);
  if (!config) {
    slurm_error("stagehand: cannot use stagehand's options: %s (ask your cluster admin)",
                escape_control(config.error().message).c_str());
    return -1;
  }
  if (options().stage_out && stage_out_at_submit(sp) != 0) {
    return -1;
  }
  if (options().stage_data) {
    auto specs = stage::parse_stage_option(*options().stage_data);
    char cwd[4096];
    if (!specs || !::getcwd(cwd, sizeof cwd)) {
      slurm_error("stagehand: %s", specs ? "--stage-data: cannot tell the current directory" : escape_control(specs.error().message).c_str());
      return -1;
    }
    auto sources = stage::check_sources(*specs, cwd, config->stage);
    if (!sources) {
      slurm_error("stagehand: %s", escape_control(sources.error().message).c_str());
      return -1;
    }
    // Canonical absolute sources reach the steps through the job's environment.
    const std::string canonical = stage::canonical_option(*sources);
    ::setenv(k_stage_env, canonical.c_str(), 1);
    // Slurm forwards only the last of several --stage-data (it keeps one value per option): put
    // all of them, checked, where the batch step reads the option, with or without --export=NONE.
    ::setenv(k_stage_option_env, canonical.c_str(), 1);
    spank_job_control_setenv(sp, k_stage_option_env, canonical.c_str(), 1);
    // For a Prolog= script too (`stagehand prolog`), whose environment has no option variable.
    spank_job_control_setenv(sp, job::k_stage_data_var, "1", 1);
  }
  return 0;
}

} // namespace stagehand::plugin
