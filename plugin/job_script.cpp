// Job prolog and epilog (as root in slurmd's job-script context): create the job's directory on
// each node at job start, remove it (or keep it, for --tmpdir=keep) at job end. Never fails: a non-zero return would drain the
// node, so problems go to the slurmd log and the job learns of them in task_init.
#include "plugin.hpp"

#include "stagehand/job/hooks.hpp"
#include "stagehand/job/job_env.hpp"
#include "stagehand/tmpdir/lifecycle.hpp"
#include "stagehand/util/escape.hpp"

#include <cstdlib>
#include <string_view>

namespace stagehand::plugin {

namespace {

enum class Phase { start, end };

// slurmd passes the job's option values in the environment; spank_option_getopt does not find
// them here (seen on Slurm 22.05).
std::optional<tmpdir::Request> tmpdir_option_of_job()
{
  const char* v = ::getenv(tmpdir::k_job_script_option_env);
  if (!v) {
    return std::nullopt;
  }
  auto r = tmpdir::parse_option(v);
  return r ? std::optional(*r) : std::nullopt;
}

int run(spank_t sp, int ac, char** av, Phase phase)
{
  const char* what = phase == Phase::start ? "prolog" : "epilog";
  tmpdir::JobContext job;
  if (spank_get_item(sp, S_JOB_ID, &job.owner.job_id) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_UID, &job.owner.uid) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_GID, &job.owner.gid) != ESPANK_SUCCESS) {
    slurm_error("stagehand: %s: cannot read the job's id and owner", what);
    return 0;
  }
  const char* node = ::getenv("SLURMD_NODENAME");
  job.node = node ? node : "";

  auto config = load(ac, av);
  if (!config) {
    slurm_error("stagehand: %s: job %u: %s", what, job.owner.job_id, escape_control(config.error().message).c_str());
    return 0;
  }
  auto done = phase == Phase::start
                ? job::job_start(*config, job, job::staging_of_job())
                : job::job_end(*config, job, tmpdir::effective_request(*config, tmpdir_option_of_job()),
                               job::k_epilog_removal_budget, job::stage_out_of_job());
  if (!done) {
    slurm_error("stagehand: %s: job %u: %s", what, job.owner.job_id, escape_control(done.error().message).c_str());
    return 0;
  }
  slurm_info("stagehand: %s: job %u: %s", what, job.owner.job_id, escape_control(*done).c_str());
  return 0;
}

} // namespace

int job_prolog(spank_t sp, int ac, char** av) { return run(sp, ac, av, Phase::start); }
int job_epilog(spank_t sp, int ac, char** av) { return run(sp, ac, av, Phase::end); }

} // namespace stagehand::plugin
