// Directory streams (DIR*) over fds, owned like every other handle.
#pragma once

#include "stagehand/util/fd.hpp"
#include "stagehand/util/result.hpp"

#include <dirent.h>

#include <memory>
#include <string>
#include <vector>

namespace stagehand::fs {

struct DirCloser
{
  void operator()(DIR* d) const { ::closedir(d); }
};
using DirStream = std::unique_ptr<DIR, DirCloser>;

// A stream that takes over `fd`; null (errno set, fd closed) on failure.
DirStream dir_stream(UniqueFd fd);

// A stream with its own file offset over the directory open at `dir_fd`, which stays open. (A
// dup() would share the offset, so a second pass over the same fd would start at the end.)
DirStream open_dir_stream(int dir_fd);

// The names in the directory open at `dir_fd` (not "." or ".."), in the order read; errors name
// `shown`.
Result<std::vector<std::string>> list_names(int dir_fd, const std::string& shown);

} // namespace stagehand::fs
