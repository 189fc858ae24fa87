// stage-run's part in a read-once broadcast (issue 11): the reader hands each file source to
// Slurm's sbcast, which reads it once and delivers a copy to the same path ($SLURM_TMPDIR/
// .stagehand-bcast-*) on every node of the job or step, then a "done" marker; every node then
// stages from its delivered copy instead of the shared filesystem. Directory sources are read on
// each node. Nothing here fails a job: when a broadcast cannot help, the node reads the sources
// itself after one line saying why.
#pragma once

#include "stagehand/stage/progress.hpp"
#include "stagehand/stage/request.hpp"
#include "stagehand/stage/spec.hpp"

#include <string>
#include <vector>

namespace stagehand::cli {

struct Delivery
{
  std::vector<stage::CheckedSource> sources; // delivered copies in place of the file sources
  std::string note;                          // for the summary lines of the delivered sources
  bool used = false;                         // whether any source comes from a delivered copy
};

// This node's part for `request.bcast`. `root_fd`: the job's directory. The read and the
// delivery show on `board` (the bytes of this node's copy), so progress lines go on meanwhile.
Delivery take_part(const stage::StageRequest& request, int root_fd, const std::vector<stage::CheckedSource>& sources,
                   stage::ProgressBoard* board);

// Removes what a broadcast of these specs left in the job's directory (copies and markers).
void remove_delivery(const stage::StageRequest& request, int root_fd, std::size_t sources);

} // namespace stagehand::cli
