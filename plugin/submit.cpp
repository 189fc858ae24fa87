// sbatch/salloc (allocator) and srun (local): checks at submit time, before anything is queued.
#include "plugin.hpp"

namespace stagehand::plugin {

int submit_init_post_opt(spank_t /*sp*/, int ac, char** av)
{
  // Option values were already checked by the option callback (a bad value stops sbatch there).
  // The config is read here only when the user asked for something, so a broken config blocks
  // stagehand's own options but never unrelated jobs.
  if (!options().tmpdir && !options().ddp_env) {
    return 0;
  }
  auto config = load(ac, av);
  if (!config) {
    slurm_error("stagehand: cannot use stagehand's options: %s (ask your cluster admin)",
                config.error().message.c_str());
    return -1;
  }
  return 0;
}

} // namespace stagehand::plugin
