// slurmstepd (remote context): make sure the job's directory exists as root, then export it to
// each task. Errors are remembered and reported from task_init, which fails the job without
// draining the node.
#include "plugin.hpp"

#include "stagehand/tmpdir/lifecycle.hpp"

#include <unistd.h>

namespace stagehand::plugin {

namespace {

struct StepState
{
  bool wants_tmpdir = false;
  std::string error;  // reported to the user in task_init
  std::optional<Config> config;
  tmpdir::JobContext job;
};

StepState& step_state()
{
  static StepState s;
  return s;
}

std::optional<std::string> job_env(spank_t sp, const char* name)
{
  char buf[4096];
  if (spank_getenv(sp, name, buf, sizeof buf) == ESPANK_SUCCESS) {
    return std::string(buf);
  }
  return std::nullopt;
}

Result<tmpdir::JobContext> job_context(spank_t sp)
{
  tmpdir::JobContext job;
  if (spank_get_item(sp, S_JOB_ID, &job.owner.job_id) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_UID, &job.owner.uid) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_GID, &job.owner.gid) != ESPANK_SUCCESS) {
    return Error::invalid("cannot read the job's id and owner from Slurm");
  }
  auto node = job_env(sp, "SLURMD_NODENAME");
  if (!node) {
    const char* env = ::getenv("SLURMD_NODENAME");
    if (!env) {
      return Error::invalid("SLURMD_NODENAME is not set");
    }
    node = env;
  }
  job.node = *node;
  return job;
}

} // namespace

int stepd_init_post_opt(spank_t sp, int ac, char** av)
{
  StepState& s = step_state();
  auto config = load(ac, av);
  if (!config) {
    slurm_error("stagehand: %s", config.error().message.c_str());
    // Only jobs that asked for stagehand's features fail; others run on.
    if (options().tmpdir) {
      s.wants_tmpdir = true;
      s.error = "the node's stagehand config is unusable (" + config.error().message + "); ask your cluster admin";
    }
    return 0;
  }
  s.config = *config;
  s.wants_tmpdir = tmpdir::effective_request(*config, options().tmpdir) != tmpdir::Request::none;
  if (!s.wants_tmpdir) {
    return 0;
  }
  auto job = job_context(sp);
  if (!job) {
    s.error = job.error().message;
    return 0;
  }
  s.job = *job;
  auto done = tmpdir::on_step_start(*config, *job);
  if (!done) {
    slurm_error("stagehand: job %u: scratch directory: %s", job->owner.job_id, done.error().message.c_str());
    s.error = done.error().message;
    return 0;
  }
  slurm_debug("stagehand: job %u: %s", job->owner.job_id, done->c_str());
  return 0;
}

int stepd_task_init(spank_t sp, int /*ac*/, char** /*av*/)
{
  StepState& s = step_state();
  if (!s.wants_tmpdir) {
    return 0;
  }
  if (!s.error.empty()) {
    slurm_error("stagehand: --tmpdir: no scratch directory on node %s: %s", s.job.node.c_str(), s.error.c_str());
    return -1;
  }
  auto base = tmpdir::base_path(*s.config, s.job.node);
  auto dir = base ? tmpdir::find_job_dir(*base, s.job.owner.job_id, ::getuid()) : Result<std::string>(base.error());
  if (!dir) {
    slurm_error("stagehand: --tmpdir: no scratch directory on node %s: %s", s.job.node.c_str(),
                dir.error().message.c_str());
    return -1;
  }
  if (spank_setenv(sp, "SLURM_TMPDIR", dir->c_str(), 1) != ESPANK_SUCCESS ||
      (s.config->tmpdir.export_tmpdir && spank_setenv(sp, "TMPDIR", dir->c_str(), 1) != ESPANK_SUCCESS)) {
    slurm_error("stagehand: --tmpdir: cannot set SLURM_TMPDIR");
    return -1;
  }
  return 0;
}

} // namespace stagehand::plugin
