// A directory source's one read on a cache miss, as the job user: every file copied into the job's
// directory as staging without the daemon copies it, and the same bytes sent on as a tar stream
// to the cache's spool (a file's data teed in the kernel from the pipe it was read into, never a
// second read of the source); or the stream by itself (a directory of small files, which a
// delivery unpacks beside the read; a read for the cache alone).
#pragma once

#include "stagehand/archive/counters.hpp"
#include "stagehand/cache/key.hpp"
#include "stagehand/cache/patience.hpp"
#include "stagehand/stage/copy.hpp"
#include "stagehand/util/result.hpp"

#include <chrono>
#include <cstdint>
#include <string>

namespace stagehand::cache {

struct StreamResult
{
  SourceIdentity identity; // of what was streamed
  bool changed = false;    // a file changed while it was read
};

struct TreeReadOptions
{
  Patience patience; // with the cache's stream (its pipe full: the spool's disk slower than the copy)
  archive::WorkCounters* progress = nullptr; // when set: follows the copy's bytes and files
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
// stream to the pipe `out_fd` is best effort: its reader gone, failing or too slow (`patience`)
// stops the stream (`stream_dropped`), never the copy; `out_fd` is made non-blocking, and once the
// stream stops it is /dev/null (the reader sees the end at once). With no destination the stream
// is all, and its failure is an error. SIGPIPE is ignored from here on.
Result<TreeRead> read_tree(int dir_fd, int dest_dir_fd, int out_fd, std::uint64_t max_bytes,
                           const std::string& canonical_path, const std::string& shown,
                           const TreeReadOptions& options = {});

// The stream alone: read_tree with no copy.
Result<StreamResult> stream_tree(int dir_fd, int out_fd, const std::string& canonical_path, const std::string& shown);

} // namespace stagehand::cache
