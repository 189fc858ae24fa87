// Copying files and directory trees into the job's directory with the kernel's fast paths.
#pragma once

#include "stagehand/archive/counters.hpp"
#include "stagehand/util/result.hpp"

#include <sys/stat.h>

#include <cstdint>
#include <string>

namespace stagehand::stage {

struct CopyStats
{
  std::uint64_t files = 0;
  std::uint64_t dirs = 0;
  std::uint64_t symlinks = 0;
  std::uint64_t skipped_special = 0;
  std::uint64_t bytes = 0;
  archive::WorkCounters* counters = nullptr; // when set, kept up to date as the copy goes (for progress)
};

// Copies the regular file open at `src_fd` to a new file `name` in `dest_dir_fd` (O_EXCL,
// O_NOFOLLOW): copy_file_range, falling back to sendfile and read/write (a pipe, the daemon's
// delivery of a miss: splice, falling back to read/write); mode without
// setuid/setgid/sticky; mtime kept. `max_bytes` bounds the bytes written (file may grow).
// `shown` names the source once, in front of every error.
Status copy_file(int src_fd, int dest_dir_fd, const std::string& name, std::uint64_t max_bytes, CopyStats& stats,
                 const std::string& shown);

// As copy_file, into `out_fd`: a new, empty file the caller created (O_EXCL) and so may remove.
Status copy_into(int src_fd, int out_fd, std::uint64_t max_bytes, CopyStats& stats, const std::string& shown);

// Copies the directory open at `src_dir_fd` into the existing directory `dest_dir_fd`: files,
// directories and symlinks (as links, never followed); devices, FIFOs and sockets are skipped.
// Walks with fs::walk_tree (bounded descriptors: a 500-deep chain and 25,000 directories work
// under `ulimit -n 256`; a directory with another filesystem mounted on it is an error, never
// entered). Errors read "SHOWN: PATH BELOW IT: reason".
Status copy_tree(int src_dir_fd, int dest_dir_fd, std::uint64_t max_bytes, CopyStats& stats, const std::string& shown);

// What a copy's file or directory open at `fd` takes from its source's `st` at the end: the mtime;
// and a directory its mode, with the owner's rwx (so that the job may change what it holds).
void keep_mtime(int fd, const struct stat& st);
void finish_dir(int fd, const struct stat& st);

} // namespace stagehand::stage
