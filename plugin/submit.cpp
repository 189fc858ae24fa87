// sbatch/salloc (allocator) and srun (local): checks at submit time, before anything is queued.
#include "plugin.hpp"

#include "stagehand/stage/spec.hpp"

#include <unistd.h>

namespace stagehand::plugin {

int submit_init_post_opt(spank_t sp, int ac, char** av)
{
  // --stage-data's sources are checked here, as the submitting user, before anything is queued.
  // Option values were already checked by the option callback (a bad value stops sbatch there).
  // The config is read here only when the user asked for something, so a broken config blocks
  // stagehand's own options but never unrelated jobs.
  if (!options().tmpdir && !options().ddp_env && !options().stage_data) {
    return 0;
  }
  auto config = load(ac, av);
  if (!config) {
    slurm_error("stagehand: cannot use stagehand's options: %s (ask your cluster admin)",
                config.error().message.c_str());
    return -1;
  }
  if (options().stage_data) {
    auto specs = stage::parse_stage_option(*options().stage_data);
    char cwd[4096];
    if (!specs || !::getcwd(cwd, sizeof cwd)) {
      slurm_error("stagehand: %s", specs ? "--stage-data: cannot tell the current directory" : specs.error().message.c_str());
      return -1;
    }
    auto sources = stage::check_sources(*specs, cwd, config->stage);
    if (!sources) {
      slurm_error("stagehand: %s", sources.error().message.c_str());
      return -1;
    }
    // Canonical absolute sources reach the steps through the job's environment.
    const std::string canonical = stage::canonical_option(*sources);
    ::setenv(k_stage_env, canonical.c_str(), 1);
    // Slurm forwards only the last of several --stage-data (it keeps one value per option): put
    // all of them, checked, where the batch step reads the option, with or without --export=NONE.
    ::setenv(k_stage_option_env, canonical.c_str(), 1);
    spank_job_control_setenv(sp, k_stage_option_env, canonical.c_str(), 1);
  }
  return 0;
}

} // namespace stagehand::plugin
