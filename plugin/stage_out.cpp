// task_init: --stage-out on this node. The epilog sees no node list, so the job's task marks the
// job's first node in its directory (as the job user); the epilog copies entries without %n there.
#include "plugin.hpp"

#include "stagehand/ddp/hostlist.hpp"
#include "stagehand/stageout/copy.hpp"
#include "stagehand/util/escape.hpp"
#include "stagehand/util/fd.hpp"

#include <fcntl.h>
#include <unistd.h>

namespace stagehand::plugin {

int mark_stage_out_node(spank_t sp, const std::string& tmpdir, const std::string& node)
{
  auto nodes = task_env(sp, "SLURM_JOB_NODELIST");
  auto first = nodes ? ddp::first_host(*nodes) : Result<std::string>(Error::internal("no SLURM_JOB_NODELIST"));
  if (!first) {
    slurm_error("stagehand: --stage-out: cannot tell the job's first node: %s", escape_control(first.error().message).c_str());
    return -1;
  }
  if (*first != node || tmpdir.empty()) {
    return 0;
  }
  UniqueFd dir(::open(tmpdir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  auto marked = dir.valid() ? stageout::mark_first_node(dir.get()) : Status(Error::from_errno(tmpdir));
  if (!marked) {
    slurm_error("stagehand: --stage-out: %s (node %s)", escape_control(marked.error().message).c_str(), node.c_str());
    return -1;
  }
  return 0;
}

} // namespace stagehand::plugin
