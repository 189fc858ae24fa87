// The one walk behind both tree copies (--stage-data's copy of a directory, --stage-out's): the
// source walked with walk_tree (bounded descriptors, no symlink followed, no mount crossed), each
// entry handed to the caller with its destination parent open, and the directories made given
// their modes last, deepest first (adding entries changes a directory's mtime; a read-only mode
// set first would stop the copy).
#pragma once

#include "stagehand/fs/walk.hpp"
#include "stagehand/util/result.hpp"

#include <sys/stat.h>

#include <functional>
#include <string>

namespace stagehand::fs {

// What the caller did with an entry: made a directory there (finished last), or anything else.
enum class Placed { directory, other };

// Walks `src_dir_fd` and calls `place(entry, dest_parent_fd)` for each entry, where
// `dest_parent_fd` is the copy of the entry's parent below `dest_dir_fd` (opened beneath it when
// the walk moves to another directory). Then `finish_dir(dir_fd, source_stat)` for each directory
// `place` made, deepest first. `shown` names the source in errors ("" for none).
Status copy_walk(int src_dir_fd, int dest_dir_fd, const std::string& shown,
                 const std::function<Result<Placed>(const WalkEntry& e, int dest_parent_fd)>& place,
                 const std::function<void(int dir_fd, const struct stat& st)>& finish_dir);

} // namespace stagehand::fs
