// Root-owned path resolution: a user-owned component or symlink anywhere on the path is refused.
#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/util/strings.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdio>
#include <deque>
#include <string_view>

namespace stagehand::fs {

namespace {

constexpr int k_max_symlinks = 32;

// Puts the components of `path` in front of `out` (empty components dropped).
void push_components(std::deque<std::string>& out, std::string_view path)
{
  std::deque<std::string> parts;
  for (std::string_view part : split(path, '/')) {
    if (!part.empty()) {
      parts.emplace_back(part);
    }
  }
  out.insert(out.begin(), parts.begin(), parts.end());
}

// Whether someone other than root can rename or replace entries of this directory: writable by
// others or by a group other than root's, without the sticky bit (which keeps root's entries root's,
// as in /tmp).
bool others_can_replace(const struct stat& st)
{
  if ((st.st_mode & S_ISVTX) != 0) {
    return false;
  }
  return (st.st_mode & S_IWOTH) != 0 || ((st.st_mode & S_IWGRP) != 0 && st.st_gid != 0);
}

Status check_parent(int fd, const std::string& path, const std::string& walked)
{
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Error::from_errno(path + ": " + (walked.empty() ? "/" : walked));
  }
  if (others_can_replace(st)) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Error{ErrorKind::refused, EPERM,
                 path + ": refused: " + (walked.empty() ? "/" : walked) + " is writable by others (mode " + mode +
                   ", no sticky bit), so a user could replace what is made below it"};
  }
  return ok_status();
}

} // namespace

Result<UniqueFd> open_trusted_dir(const std::string& path, CreateMissing create)
{
  if (path.empty() || path[0] != '/') {
    return Error::refused(path + ": not an absolute path");
  }
  auto open_root = [] { return UniqueFd(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC)); };
  UniqueFd cur = open_root();
  if (!cur.valid()) {
    return Error::from_errno("/");
  }
  std::deque<std::string> todo;
  push_components(todo, path);
  std::string walked;
  int symlinks = 0;
  bool cur_checked = false; // whether `cur` may be a parent: nobody but root can replace entries

  while (!todo.empty()) {
    std::string comp = std::move(todo.front());
    todo.pop_front();
    if (comp == ".") {
      continue;
    }
    if (!cur_checked) {
      if (auto ok = check_parent(cur.get(), path, walked); !ok) {
        return ok.error();
      }
      cur_checked = true;
    }
    if (comp == "..") {
      return Error::refused(path + ": \"..\" is not allowed in this path");
    }
    struct stat st {};
    if (::fstatat(cur.get(), comp.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT && create == CreateMissing::yes) {
        if (::mkdirat(cur.get(), comp.c_str(), 0755) != 0 && errno != EEXIST) {
          return Error::from_errno(path + ": cannot create " + walked + "/" + comp);
        }
        todo.push_front(comp); // look at what is there now, whoever made it
        continue;
      }
      return Error::from_errno(path + ": " + walked + "/" + comp);
    }
    if (S_ISLNK(st.st_mode)) {
      if (st.st_uid != 0) {
        return Error{ErrorKind::refused, EPERM, path + ": refused: symlink " + walked + "/" + comp + " is not owned by root"};
      }
      if (++symlinks > k_max_symlinks) {
        return Error{ErrorKind::refused, ELOOP, path + ": too many symlinks"};
      }
      char target[4096];
      ssize_t n = ::readlinkat(cur.get(), comp.c_str(), target, sizeof target - 1);
      if (n < 0) {
        return Error::from_errno(path + ": " + walked + "/" + comp);
      }
      std::string_view t(target, static_cast<std::size_t>(n));
      if (!t.empty() && t[0] == '/') {
        cur = open_root();
        walked.clear();
        cur_checked = false;
      }
      push_components(todo, t);
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      return Error{ErrorKind::refused, ENOTDIR, path + ": " + walked + "/" + comp + " is not a directory"};
    }
    UniqueFd next(::openat(cur.get(), comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) {
      return Error::from_errno(path + ": " + walked + "/" + comp);
    }
    // Decide on what was opened, not on what was stat'ed by name.
    if (::fstat(next.get(), &st) != 0) {
      return Error::from_errno(path + ": " + walked + "/" + comp);
    }
    if (st.st_uid != 0) {
      return Error{ErrorKind::refused, EPERM, path + ": refused: " + walked + "/" + comp + " is owned by uid " +
                            std::to_string(st.st_uid) + ", not root"};
    }
    walked += "/" + comp;
    cur = std::move(next);
    cur_checked = false;
  }

  struct stat st {};
  if (::fstat(cur.get(), &st) != 0) {
    return Error::from_errno(path);
  }
  if (st.st_uid != 0) {
    return Error{ErrorKind::refused, EPERM, path + ": refused: not owned by root"};
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return Error{ErrorKind::refused, EPERM, path + ": refused: writable by group or others"};
  }
  return cur;
}

} // namespace stagehand::fs
