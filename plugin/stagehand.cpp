// The SPANK entry points: Slurm's symbols, and a dispatch on spank_context() to one file per context.
#include "plugin.hpp"

#include <slurm/slurm_version.h>

using namespace stagehand::plugin;

namespace {

// No exception may cross into Slurm: every entry point goes through here.
template<typename F> int guarded(const char* where, F&& f)
{
  try {
    return f();
  } catch (const std::exception& e) {
    slurm_error("stagehand: internal error in %s: %s", where, e.what());
  } catch (...) {
    slurm_error("stagehand: internal error in %s", where);
  }
  return spank_context() == S_CTX_JOB_SCRIPT ? 0 : -1; // never drain a node over our own bug
}

} // namespace

extern "C" {

__attribute__((visibility("default"))) extern const char plugin_name[] = "stagehand";
__attribute__((visibility("default"))) extern const char plugin_type[] = "spank";
__attribute__((visibility("default"))) extern const unsigned int plugin_version = SLURM_VERSION_NUMBER;
__attribute__((visibility("default"))) extern const unsigned int spank_plugin_version = 1;

__attribute__((visibility("default"))) int slurm_spank_init(spank_t sp, int ac, char** av)
{
  return guarded("init", [&] {
    if (spank_context() == S_CTX_SLURMD) { // once per slurmd start (and reconfigure)
      if (auto config = load(ac, av)) {
        log_broadcast_layout(*config);
        if (auto hidden = base_hidden_by_job_namespace(*config, std::nullopt)) {
          slurm_error("stagehand: %s", hidden->c_str());
        }
      }
      return 0;
    }
    if (spank_context() == S_CTX_ALLOCATOR) {
      for (struct spank_option* o = spank_options; o->name; ++o) {
        if (spank_option_register(sp, o) != ESPANK_SUCCESS) {
          slurm_error("stagehand: cannot register --%s", o->name);
          return -1;
        }
      }
    }
    return 0;
  });
}

__attribute__((visibility("default"))) int slurm_spank_init_post_opt(spank_t sp, int ac, char** av)
{
  return guarded("init_post_opt", [&] {
    switch (spank_context()) {
    case S_CTX_ALLOCATOR:
    case S_CTX_LOCAL:
      return submit_init_post_opt(sp, ac, av);
    case S_CTX_REMOTE:
      return stepd_init_post_opt(sp, ac, av);
    default:
      return 0;
    }
  });
}

__attribute__((visibility("default"))) int slurm_spank_task_init(spank_t sp, int ac, char** av)
{
  return guarded("task_init", [&] { return stepd_task_init(sp, ac, av); });
}

__attribute__((visibility("default"))) int slurm_spank_task_init_privileged(spank_t sp, int ac, char** av)
{
  // Never fails the task (slurmstepd treats a failure here as fatal): errors log one line.
  try {
    return stepd_privileged(sp, ac, av);
  } catch (...) {
    slurm_error("stagehand: internal error in task_init_privileged; staging without views");
  }
  return 0;
}

__attribute__((visibility("default"))) int slurm_spank_job_prolog(spank_t sp, int ac, char** av)
{
  return guarded("job_prolog", [&] { return job_prolog(sp, ac, av); });
}

__attribute__((visibility("default"))) int slurm_spank_job_epilog(spank_t sp, int ac, char** av)
{
  return guarded("job_epilog", [&] { return job_epilog(sp, ac, av); });
}

} // extern "C"
