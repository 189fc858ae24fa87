// task_init: running the staging helper (`stagehand stage-run`) as the task's user, in one
// place: its arguments, fork and exec, and one line for every way it can end badly.
#include "plugin.hpp"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace stagehand::plugin {

namespace {

std::string signal_name(int sig)
{
  const char* abbrev = ::sigabbrev_np(sig); // "KILL"
  return abbrev ? std::string("SIG") + abbrev : "unknown";
}

} // namespace

int run_stage_helper(const std::string& helper_path, const stage::StageRequest& request,
                     const std::vector<std::string>& env)
{
  std::vector<std::string> argv_s = {helper_path, stage::k_stage_run_command};
  for (auto& a : stage::request_args(request)) {
    argv_s.push_back(std::move(a));
  }
  std::vector<char*> argv;
  for (auto& a : argv_s) {
    argv.push_back(a.data());
  }
  argv.push_back(nullptr);
  std::vector<std::string> env_s = env;
  std::vector<char*> envp;
  for (auto& e : env_s) {
    envp.push_back(e.data());
  }
  envp.push_back(nullptr);
  const char* node = request.node.c_str();

  // Everything the child needs is ready before fork: it only opens, dups and execs.
  pid_t pid = ::fork();
  if (pid < 0) {
    slurm_error("stagehand: --stage-data: cannot start the staging helper on node %s: %m", node);
    return -1;
  }
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
      ::dup2(devnull, 0);
    }
    (void)stage::set_helper_limits(); // its own limits, not slurmstepd's
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  // Unbounded on purpose: staging takes as long as its data does. This wait is in the task (the
  // user's process, forked by slurmstepd), not in slurmstepd; the job's end kills it and the helper
  // (same step, same cgroup), so it never holds slurmstepd.
  int status = 0;
  pid_t waited = 0;
  while ((waited = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
  }
  if (waited < 0) {
    slurm_error("stagehand: --stage-data: cannot wait for the staging helper on node %s: %m", node);
    return -1;
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    slurm_error("stagehand: --stage-data: the staging helper was killed by signal %d (%s) on node %s", sig,
                signal_name(sig).c_str(), node);
    return -1;
  }
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  switch (code) {
  case 0:
    return 0;
  case 1:
    return -1; // the helper printed the reason
  case 127:
    slurm_error("stagehand: --stage-data: cannot run %s on node %s (ask your cluster admin)", helper_path.c_str(), node);
    return -1;
  default:
    slurm_error("stagehand: --stage-data: the staging helper failed with exit status %d on node %s", code, node);
    return -1;
  }
}

} // namespace stagehand::plugin
