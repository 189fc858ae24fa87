// A directory source's one read on a cache miss, as the job user: every file copied into the job's
// directory as staging without the daemon copies it, and the same bytes sent on as a tar stream
// to the cache's spool (a file's data teed in the kernel from the pipe it was read into, never a
// second read of the source); or, for the cache alone, the stream by itself.
#pragma once

#include "stagehand/cache/key.hpp"
#include "stagehand/stage/copy.hpp"
#include "stagehand/util/result.hpp"

#include <cstdint>
#include <string>

namespace stagehand::cache {

struct StreamResult
{
  SourceIdentity identity; // of what was streamed
  bool changed = false;    // a file changed while it was read
};

struct TreeRead
{
  StreamResult streamed;      // the identity of what was read, and whether it changed meanwhile
  stage::CopyStats copied;    // what the job's copy holds
  std::string stream_dropped; // "" when the stream holds the whole tree; else why it stopped
};

// Walks the directory open at `dir_fd` (bounded descriptors, no symlink followed, no mount
// entered; each file and directory opened as the caller, which is the permission check, and keyed
// as identify_tree keys it). With `dest_dir_fd` >= 0 it makes the tree again below that directory
// by stage::copy_tree's rules (modes and mtimes kept, owned by the caller, directories' modes last,
// symlinks as links, devices, FIFOs and sockets skipped, at most `max_bytes` of data), and the
// stream to the pipe `out_fd` is best effort: its reader gone or failing stops the stream
// (`stream_dropped`), never the copy. With no destination the stream is all, and its failure is an
// error. SIGPIPE is ignored from here on. Errors name paths below the source ("SHOWN/REL: ...").
Result<TreeRead> read_tree(int dir_fd, int dest_dir_fd, int out_fd, std::uint64_t max_bytes,
                           const std::string& canonical_path, const std::string& shown);

// The stream alone: read_tree with no copy.
Result<StreamResult> stream_tree(int dir_fd, int out_fd, const std::string& canonical_path, const std::string& shown);

} // namespace stagehand::cache
