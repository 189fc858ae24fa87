// Root side: a cache entry's data into a job's directory. Directories are made and chowned to the
// job user; files are hard links to the cache's read-only files (the same filesystem), else
// reflinks (FICLONE), else copies chowned to the user. The job can read, rename and delete what it
// got but never write through it into the cache.
#pragma once

#include "stagehand/util/result.hpp"

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace stagehand::cache {

struct Materialised
{
  std::uint64_t files = 0;
  std::uint64_t bytes = 0;
  std::uint64_t linked = 0; // files hard-linked (the rest were cloned or copied)
  std::string created_top;  // the outermost path this call created below the job directory
  ino_t created_ino = 0;    // its inode, as created
};

struct JobUser
{
  uid_t uid = 0;
  gid_t gid = 0;
};

// Makes `dest_rel` (normalised, relative, must not exist) below the job directory `job_fd` from
// `src_name` (a file or directory) in `src_parent_fd`. Missing parents of `dest_rel` are created
// owned by the user. Everything below the job directory is reached with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV): a job that swaps its directories for symlinks meanwhile
// makes this fail, never write elsewhere. On failure what this call made is removed.
Result<Materialised> materialise(int src_parent_fd, const std::string& src_name, int job_fd,
                                 const std::string& dest_rel, const JobUser& user);

} // namespace stagehand::cache
