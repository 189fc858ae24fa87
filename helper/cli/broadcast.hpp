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
  std::vector<stage::CheckedSource> sources; // a delivered copy in place of each file source that has one
  std::vector<bool> copied;                  // per source: `sources[i]` is its delivered copy
  std::vector<std::string> identities;       // per copied source: what the broadcast read (bcast_marker.hpp)
  std::string note;                          // for the summary lines of the delivered sources
  bool used = false;                         // whether any source comes from a delivered copy
  // A reader: whether the nodes of its scope heard from it (its final marker was delivered), so
  // that none of them waits for it any more.
  bool told = true;
};

// This node's part for `request.bcast`, for the sources `wanted` marks (the ones this node must
// still stage: all of them without a node daemon, its cache's misses with one). The reader reads
// and broadcasts its wanted file sources and then a "done" marker naming them (a marker naming
// none when it needs none: the others then stop waiting and read theirs themselves); a receiver
// waits for that marker when it wants a file source. `root_fd`: the job's directory. The read and
// the delivery show on `board` (the bytes of this node's copy), so progress lines go on meanwhile.
Delivery take_part(const stage::StageRequest& request, int root_fd, const std::vector<stage::CheckedSource>& sources,
                   const std::vector<bool>& wanted, stage::ProgressBoard* board);

// The step's reader staged these specs here before (or failed to): tells the step's nodes so in a
// "nothing sent" marker (or the "failed" marker), and those that still stage read the sources
// themselves at once instead of waiting out their deadline. Only a reader sends; a marker that
// cannot be sent leaves them to that deadline (false).
enum class Told { nothing_sent, failed };
bool tell_step(const stage::StageRequest& request, int root_fd, Told told);

// Removes what a broadcast of these specs left in the job's directory (copies and markers).
void remove_delivery(const stage::StageRequest& request, int root_fd, std::size_t sources);

} // namespace stagehand::cli
