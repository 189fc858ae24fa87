// Staging on one node: every checked source into the job's directory, one summary line each;
// on failure, nothing partial stays behind.
#pragma once

#include "stagehand/archive/counters.hpp"
#include "stagehand/stage/progress.hpp"
#include "stagehand/stage/spec.hpp"
#include "stagehand/stage/summary.hpp"
#include "stagehand/util/result.hpp"

#include <sys/stat.h>

#include <functional>
#include <string>
#include <vector>

namespace stagehand::stage {

struct StageLimits
{
  std::uint64_t max_bytes = 2ULL << 40; // per job, per node: data written in total
  unsigned writer_threads = 0;          // for archives; see archive::ExtractLimits
  std::vector<std::string> allowed_roots; // [stage] allowed_roots, checked again on what is opened
  ProgressBoard* progress = nullptr;      // when set: the source being staged, for a reporter thread
};

// Stages `sources` below the directory open at `tmpdir_fd`. Each source is opened with
// open_source (no FIFO hangs it; allowed_roots checked on the descriptor); each destination is
// created exclusively (an existing one is refused, never replaced). Returns one summary line per
// source ("what -> where: N files, B bytes, S s"). On error (out of memory included: no exception
// leaves it), what this call created is removed, nothing else, and the error names the source and
// the reason.
// What arrives on a stream (a pipe from the node daemon) for one destination.
enum class StreamContent {
  plain_file, // the bytes of one file: copied to DEST
  archive,    // an archive: unpacked into the directory DEST ("unpacked")
  tree,       // a directory streamed as a tar (cache::stream_tree): made again at DEST ("copied")
};

using Delivered = Placed;

// One source's bytes, read from `in_fd` (a pipe is fine: nothing seeks), placed at `dest` below
// the directory open at `tmpdir_fd` exactly as stage_all places a source opened here: parents made
// 0755, DEST created exclusively, files with the modes the archive gives them, owned by whoever
// runs this (the job user). At most `room` bytes of file data. On error, what it created is gone
// and the error is the reason alone (the caller names the source). A plain file takes the mode
// and times of `file_stat` (the source's: a stream has none). `counters`, when set, follow the
// bytes written.
struct DeliverTo
{
  int tmpdir_fd = -1;
  std::string dest;
  std::uint64_t room = 0;
  archive::WorkCounters* counters = nullptr;
};
Result<Delivered> deliver(int in_fd, StreamContent content, const struct stat& file_stat, const DeliverTo& to,
                          const std::string& shown);

// The same for a directory that `fill(dest_dir_fd)` makes (the daemon's reader of a directory
// source, copying it as it streams it to the cache): DEST made as for an archive, 0755 once
// filled, and on an error what was created is gone.
Result<Delivered> deliver_dir(const DeliverTo& to, const std::function<Result<Delivered>(int dest_dir_fd)>& fill);

// The outermost component of `dest` below `root_fd` that does not exist yet ("data/x.bin" when the
// job made "data"; "" when DEST exists): what staging may create, and so all that a failed attempt
// may remove.
std::string outermost_missing(int root_fd, const std::string& dest);

Result<std::vector<std::string>> stage_all(const std::vector<CheckedSource>& sources, int tmpdir_fd,
                                           const std::string& tmpdir_path, const StageLimits& limits);

} // namespace stagehand::stage
