// A depth-first walk of a directory tree with a bounded number of open descriptors (root's fd plus
// the directory being read): entries are listed and sorted per directory, and each directory is
// reopened from the root with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV), so
// a 500-deep chain or 25,000 directories work under `ulimit -n 256`, no symlink is followed and no
// mount point is entered.
#pragma once

#include "stagehand/util/fd.hpp"
#include "stagehand/util/result.hpp"

#include <sys/stat.h>

#include <functional>
#include <string>

namespace stagehand::fs {

// Opens `rel` (relative, may be "" or "." for the root itself) below `root_fd` without following
// any symlink or crossing a mount (a mount point is EXDEV, refused before the filesystem mounted
// there is asked anything); `flags` as for openat. Paths longer than PATH_MAX work.
Result<UniqueFd> open_beneath(int root_fd, const std::string& rel, int flags);

struct WalkEntry
{
  const std::string& rel; // path relative to the root ("a/b"); never empty
  const std::string& name;
  int parent_fd;          // the directory holding `name`, open while the visitor runs
  const struct stat& st;  // lstat of the entry
};

enum class WalkControl { go_on, skip_dir };

// Visits every entry below `root_fd` in sorted order, directories before their contents. The
// visitor may return an error to stop. A directory with another filesystem mounted on it (by
// mount id, so a btrfs subvolume is walked) is visited, then refused (EXDEV, naming it) instead of
// entered: a walk never leaves part of a tree out silently.
Status walk_tree(int root_fd, const std::function<Result<WalkControl>(const WalkEntry&)>& visit);

} // namespace stagehand::fs
