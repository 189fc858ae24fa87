#include "stagehand/fs/tree_copy.hpp"

#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/util/fd.hpp"

#include <fcntl.h>

#include <utility>
#include <vector>

namespace stagehand::fs {

Status copy_walk(int src_dir_fd, int dest_dir_fd, const std::string& shown,
                 const std::function<Result<Placed>(const WalkEntry& e, int dest_parent_fd)>& place,
                 const std::function<void(int dir_fd, const struct stat& st)>& finish_dir)
{
  std::vector<std::pair<std::string, struct stat>> dirs; // in walk (pre-)order
  std::string open_rel;
  UniqueFd dest_parent(::fcntl(dest_dir_fd, F_DUPFD_CLOEXEC, 0));
  auto walked = walk_tree(src_dir_fd, [&](const WalkEntry& e) -> Result<WalkControl> {
    const std::size_t slash = e.rel.rfind('/');
    const std::string parent_rel = slash == std::string::npos ? std::string() : e.rel.substr(0, slash);
    if (parent_rel != open_rel || !dest_parent.valid()) {
      auto fd = open_beneath(dest_dir_fd, parent_rel, O_RDONLY | O_DIRECTORY);
      if (!fd) {
        const std::string copy_of = shown.empty() ? parent_rel : shown + "/" + parent_rel;
        return fd.error().with_context("cannot open the copy of " + copy_of);
      }
      dest_parent = std::move(*fd);
      open_rel = parent_rel;
    }
    auto placed = place(e, dest_parent.get());
    if (!placed) {
      return placed.error();
    }
    if (*placed == Placed::directory) {
      dirs.emplace_back(e.rel, e.st);
    }
    return WalkControl::go_on;
  });
  if (!walked) {
    return walked;
  }
  dest_parent.reset();
  // Reverse pre-order puts every directory after all of its descendants.
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    if (auto fd = open_beneath(dest_dir_fd, it->first, O_RDONLY | O_DIRECTORY)) {
      finish_dir(fd->get(), it->second);
    }
  }
  return ok_status();
}

} // namespace stagehand::fs
