// task_init: --stage-data on this node. The task is already the job user (uid, gid, groups), so
// the helper it runs reads sources with the user's credentials only. The helper, not the plugin,
// links libarchive: srun and slurmstepd load nothing more at each step.
#include "plugin.hpp"

#include "stagehand/stage/spec.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

namespace stagehand::plugin {

int stage_data(spank_t sp, const Config& config, const Args& args, const std::string& tmpdir, const std::string& node)
{
  if (tmpdir.empty()) {
    slurm_error("stagehand: --stage-data: no SLURM_TMPDIR on node %s", node.c_str());
    return -1;
  }
  // Canonical sources from sbatch/srun's check; else the raw value, relative to the submit dir.
  std::string specs = task_env(sp, k_stage_env).value_or(*options().stage_data);
  // Staged already on this node (an earlier task or step with the same specs): nothing to start.
  if (::access((tmpdir + "/.stagehand/" + stage::done_marker(specs)).c_str(), F_OK) == 0) {
    return 0;
  }
  std::vector<std::string> argv_s = {args.helper_path, "stage-run", "--tmpdir", tmpdir, "--node", node,
                                     "--max-bytes", std::to_string(config.stage.max_bytes)};
  if (auto base = task_env(sp, "SLURM_SUBMIT_DIR")) {
    argv_s.insert(argv_s.end(), {"--base", *base});
  }
  for (const auto& root : config.stage.allowed_roots) {
    argv_s.insert(argv_s.end(), {"--allowed-root", root});
  }
  argv_s.push_back(specs);
  std::vector<char*> argv;
  for (auto& a : argv_s) {
    argv.push_back(a.data());
  }
  argv.push_back(nullptr);
  char* envp[] = {nullptr};

  pid_t pid = ::fork();
  if (pid < 0) {
    slurm_error("stagehand: --stage-data: cannot start the helper: %m");
    return -1;
  }
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
      ::dup2(devnull, 0);
    }
    ::execve(argv[0], argv.data(), envp);
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    return 0;
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) {
    slurm_error("stagehand: --stage-data: cannot run %s (ask your cluster admin)", args.helper_path.c_str());
  }
  return -1; // the helper printed the reason
}

} // namespace stagehand::plugin
