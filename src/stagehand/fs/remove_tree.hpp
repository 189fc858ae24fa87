// Removes a directory tree as root without following symlinks or crossing mount points.
#pragma once

#include "stagehand/util/result.hpp"

#include <cstdint>
#include <string>

namespace stagehand::fs {

struct RemoveStats
{
  std::uint64_t removed = 0;          // entries unlinked
  std::uint64_t mounts_left = 0;      // mount points found inside and left in place
};

// Removes `name` in the directory `parent_fd` and everything below it. Walks with directory fds
// (openat O_NOFOLLOW, unlinkat) and an explicit stack; bounds the open fds by moving very deep
// subtrees up to the top of the tree. A symlink is unlinked, never followed; a directory on
// another mount is left in place and reported. Keeps going after an error and returns the first.
// A missing `name` is success.
Status remove_tree(int parent_fd, const std::string& name, RemoveStats* stats = nullptr);

} // namespace stagehand::fs
