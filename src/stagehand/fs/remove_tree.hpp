// Removes a directory tree as root without following symlinks or crossing mount points.
#pragma once

#include "stagehand/util/result.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace stagehand::fs {

struct RemoveStats
{
  std::uint64_t removed = 0;          // entries unlinked
  std::uint64_t mounts_left = 0;      // mount points found inside and left in place
};

// Removes `name` in the directory `parent_fd` and everything below it. Walks with directory fds
// (openat2 RESOLVE_NO_XDEV | RESOLVE_NO_SYMLINKS, unlinkat; entry types from readdir, never a
// stat by name) and an explicit stack; bounds the open fds by moving very deep subtrees up to the
// top of the tree. A symlink is unlinked, never followed; a mount point (told by the kernel's
// refusal to cross it, or by its mount id) is left in place, unvisited, and reported as EXDEV, so
// a user's hung FUSE mount cannot block the caller. A btrfs subvolume is on the same mount and is
// removed. Keeps going after an error and returns the first. A missing `name` is success.
Status remove_tree(int parent_fd, const std::string& name, RemoveStats* stats = nullptr);

// As above, but stops when `deadline` passes, leaving the rest in place: an io error with
// ETIMEDOUT. For the epilog's bounded removal when no daemon finishes the job in the background.
Status remove_tree_until(int parent_fd, const std::string& name, std::chrono::steady_clock::time_point deadline,
                         RemoveStats* stats = nullptr);

} // namespace stagehand::fs
