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

UniqueFd open_root() { return UniqueFd(::open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC)); }

// Where open_trusted_dir's walk stands: the directory reached, and the components still to go.
struct TrustedWalk
{
  const std::string& path;
  CreateMissing create;
  UniqueFd cur;
  std::deque<std::string> todo{};
  std::string walked{};
  int symlinks = 0;
  bool cur_checked = false; // whether `cur` may be a parent: nobody but root can replace entries
};

// Follows the symlink `comp` of `w.cur` if root owns it: its target's components go first.
Status follow_symlink(TrustedWalk& w, const std::string& comp, const struct stat& st)
{
  if (st.st_uid != 0) {
    return Error{ErrorKind::refused, EPERM,
                 w.path + ": refused: symlink " + w.walked + "/" + comp + " is not owned by root"};
  }
  if (++w.symlinks > k_max_symlinks) {
    return Error{ErrorKind::refused, ELOOP, w.path + ": too many symlinks"};
  }
  char target[4096];
  ssize_t n = ::readlinkat(w.cur.get(), comp.c_str(), target, sizeof target - 1);
  if (n < 0) {
    return Error::from_errno(w.path + ": " + w.walked + "/" + comp);
  }
  std::string_view t(target, static_cast<std::size_t>(n));
  if (!t.empty() && t[0] == '/') {
    w.cur = open_root();
    w.walked.clear();
    w.cur_checked = false;
  }
  push_components(w.todo, t);
  return ok_status();
}

// Steps into the directory `comp` of `w.cur`, without following a symlink, if root owns it.
Status enter_dir(TrustedWalk& w, const std::string& comp)
{
  UniqueFd next(::openat(w.cur.get(), comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!next.valid()) {
    return Error::from_errno(w.path + ": " + w.walked + "/" + comp);
  }
  // Decide on what was opened, not on what was stat'ed by name.
  struct stat st {};
  if (::fstat(next.get(), &st) != 0) {
    return Error::from_errno(w.path + ": " + w.walked + "/" + comp);
  }
  if (st.st_uid != 0) {
    return Error{ErrorKind::refused, EPERM, w.path + ": refused: " + w.walked + "/" + comp + " is owned by uid " +
                                              std::to_string(st.st_uid) + ", not root"};
  }
  w.walked += "/" + comp;
  w.cur = std::move(next);
  w.cur_checked = false;
  return ok_status();
}

// One component of the path.
Status step(TrustedWalk& w, const std::string& comp)
{
  if (comp == ".") {
    return ok_status();
  }
  if (!w.cur_checked) {
    if (auto ok = check_parent(w.cur.get(), w.path, w.walked); !ok) {
      return ok.error();
    }
    w.cur_checked = true;
  }
  if (comp == "..") {
    return Error::refused(w.path + ": \"..\" is not allowed in this path");
  }
  struct stat st {};
  if (::fstatat(w.cur.get(), comp.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT && w.create == CreateMissing::yes) {
      if (::mkdirat(w.cur.get(), comp.c_str(), 0755) != 0 && errno != EEXIST) {
        return Error::from_errno(w.path + ": cannot create " + w.walked + "/" + comp);
      }
      w.todo.push_front(comp); // look at what is there now, whoever made it
      return ok_status();
    }
    return Error::from_errno(w.path + ": " + w.walked + "/" + comp);
  }
  if (S_ISLNK(st.st_mode)) {
    return follow_symlink(w, comp, st);
  }
  if (!S_ISDIR(st.st_mode)) {
    return Error{ErrorKind::refused, ENOTDIR, w.path + ": " + w.walked + "/" + comp + " is not a directory"};
  }
  return enter_dir(w, comp);
}

// The directory reached must be root's, and not writable by group or others.
Status check_final(int fd, const std::string& path)
{
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Error::from_errno(path);
  }
  if (st.st_uid != 0) {
    return Error{ErrorKind::refused, EPERM, path + ": refused: not owned by root"};
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return Error{ErrorKind::refused, EPERM, path + ": refused: writable by group or others"};
  }
  return ok_status();
}

} // namespace

Result<UniqueFd> open_trusted_dir(const std::string& path, CreateMissing create)
{
  if (path.empty() || path[0] != '/') {
    return Error::refused(path + ": not an absolute path");
  }
  TrustedWalk w{path, create, open_root()};
  if (!w.cur.valid()) {
    return Error::from_errno("/");
  }
  push_components(w.todo, path);
  while (!w.todo.empty()) {
    std::string comp = std::move(w.todo.front());
    w.todo.pop_front();
    if (auto stepped = step(w, comp); !stepped) {
      return stepped.error();
    }
  }
  if (auto ok = check_final(w.cur.get(), path); !ok) {
    return ok.error();
  }
  return std::move(w.cur);
}

} // namespace stagehand::fs
