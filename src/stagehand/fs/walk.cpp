// Bounded-descriptor tree walk.
#include "stagehand/fs/walk.hpp"

#include "stagehand/fs/dir_stream.hpp"
#include "stagehand/fs/stat.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

namespace stagehand::fs {

namespace {

long sys_openat2(int dirfd, const char* path, struct open_how* how)
{
  return ::syscall(SYS_openat2, dirfd, path, how, sizeof(*how));
}

struct Pending
{
  std::string rel; // a directory still to list
};

} // namespace

Result<UniqueFd> open_beneath(int root_fd, const std::string& rel, int flags)
{
  // Paths deeper than PATH_MAX are opened a chunk at a time, each chunk beneath the last.
  constexpr std::size_t k_chunk = 2048;
  if (rel.size() > k_chunk) {
    std::size_t cut = rel.rfind('/', k_chunk);
    if (cut == std::string::npos || cut == 0) {
      errno = ENAMETOOLONG;
      return Error::from_errno(rel.substr(0, 64) + "...");
    }
    auto head = open_beneath(root_fd, rel.substr(0, cut), O_RDONLY | O_DIRECTORY);
    if (!head) {
      return head.error();
    }
    auto tail = open_beneath(head->get(), rel.substr(cut + 1), flags);
    if (!tail) {
      return Error{tail.error().kind, tail.error().code, rel.substr(0, cut) + "/" + tail.error().message};
    }
    return tail;
  }
  const char* path = rel.empty() ? "." : rel.c_str();
  struct open_how how {};
  how.flags = static_cast<std::uint64_t>(flags | O_CLOEXEC | O_NOFOLLOW);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS;
  long fd = sys_openat2(root_fd, path, &how);
  if (fd < 0 && errno == ENOSYS) {
    // Kernels before 5.6: a component-by-component O_NOFOLLOW walk gives the same guarantees
    // except the mount check, which callers make with st_dev.
    UniqueFd cur(::fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
    std::string_view rest = rel;
    while (!rest.empty() && cur.valid()) {
      std::size_t slash = rest.find('/');
      std::string comp(rest.substr(0, slash));
      rest = slash == std::string_view::npos ? std::string_view() : rest.substr(slash + 1);
      if (comp.empty() || comp == ".") {
        continue;
      }
      if (comp == "..") {
        errno = EXDEV;
        return Error::from_errno(rel);
      }
      int f = rest.empty() ? flags : (O_RDONLY | O_DIRECTORY);
      cur.reset(::openat(cur.get(), comp.c_str(), f | O_CLOEXEC | O_NOFOLLOW));
    }
    if (!cur.valid()) {
      return Error::from_errno(rel);
    }
    return cur;
  }
  if (fd < 0) {
    return Error::from_errno(rel.empty() ? "." : rel);
  }
  return UniqueFd(static_cast<int>(fd));
}

Status walk_tree(int root_fd, const std::function<Result<WalkControl>(const WalkEntry&)>& visit)
{
  auto root_id = file_id(root_fd, "walk");
  if (!root_id) {
    return root_id.error();
  }
  std::vector<Pending> stack{{""}};
  while (!stack.empty()) {
    std::string dir_rel = std::move(stack.back().rel);
    stack.pop_back();
    auto dir = open_beneath(root_fd, dir_rel, O_RDONLY | O_DIRECTORY);
    // Another filesystem mounted inside: never entered, and never silently left out either.
    auto id = dir ? file_id(dir->get(), dir_rel) : Result<FileId>(dir.error());
    if ((!dir && dir.error().code == EXDEV) || (id && !same_mount(*id, *root_id))) {
      return Error::refused(dir_rel + ": another filesystem is mounted there: not entered", EXDEV);
    }
    if (!dir) {
      return dir.error();
    }
    auto listed = list_names(dir->get(), dir_rel.empty() ? "." : dir_rel);
    if (!listed) {
      return listed.error();
    }
    std::vector<std::string>& names = *listed;
    std::sort(names.begin(), names.end());
    std::vector<std::string> subdirs;
    for (const auto& name : names) {
      std::string rel = dir_rel.empty() ? name : dir_rel + "/" + name;
      struct stat st {};
      if (::fstatat(dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return Error::from_errno(rel);
      }
      auto ctl = visit(WalkEntry{rel, name, dir->get(), st});
      if (!ctl) {
        return ctl.error();
      }
      if (S_ISDIR(st.st_mode) && *ctl == WalkControl::go_on) {
        subdirs.push_back(std::move(rel));
      }
    }
    // Pushed in reverse so the first subdirectory is visited first.
    for (auto it = subdirs.rbegin(); it != subdirs.rend(); ++it) {
      stack.push_back(Pending{std::move(*it)});
    }
  }
  return ok_status();
}

} // namespace stagehand::fs
