// slurmd start and task_init: a [tmpdir] base that Slurm's per-job private directories
// (namespace/tmpfs, job_container/tmpfs) hide from the jobs (tmpdir/job_namespace.hpp) is said
// once in the slurmd log when slurmd starts, and is the reason a task gives when it finds no
// directory. slurm.conf is found as Slurm's clients find it; job_container.conf lies beside it.
#include "plugin.hpp"

#include "stagehand/tmpdir/job_namespace.hpp"

#include <slurm/slurm.h>

#include <fstream>
#include <sstream>

namespace stagehand::plugin {

namespace {

// A config file's text; empty when it is missing or unreadable (then nothing is private).
std::string read_text(const std::string& path)
{
  std::ifstream f(path);
  std::ostringstream s;
  if (f) {
    s << f.rdbuf();
  }
  return s.str();
}

// slurmd's own -f PATH, from its command line.
std::optional<std::string> slurmd_conf_argument()
{
  std::ifstream f("/proc/self/cmdline");
  std::string arg;
  bool next = false;
  while (std::getline(f, arg, '\0')) {
    if (next) {
      return arg;
    }
    next = arg == "-f";
  }
  return std::nullopt;
}

} // namespace

std::optional<std::string> base_hidden_by_job_namespace(const Config& config, std::optional<std::string> conf_path)
{
  if (!conf_path) {
    conf_path = slurmd_conf_argument();
  }
  if (!conf_path) {
    if (const char* env = ::getenv("SLURM_CONF")) {
      conf_path = env;
    }
  }
  const std::string slurm_conf = conf_path.value_or("/etc/slurm/slurm.conf");
  const std::string dir = slurm_conf.substr(0, slurm_conf.rfind('/') + 1);
  auto dirs = tmpdir::private_job_dirs(read_text(slurm_conf), read_text(dir + "job_container.conf"));
  auto hiding = tmpdir::dir_hiding_base(config.tmpdir.base, dirs);
  if (!hiding) {
    return std::nullopt;
  }
  return tmpdir::hidden_base_message(config.tmpdir.base, *hiding);
}

} // namespace stagehand::plugin
