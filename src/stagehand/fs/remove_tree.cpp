// fd-based recursive removal (the fix pattern of CVE-2023-41914, systemd's rm_rf_children).
#include "stagehand/fs/remove_tree.hpp"

#include "stagehand/fs/dir_stream.hpp"
#include "stagehand/fs/stat.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/util/fd.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <vector>

namespace stagehand::fs {

namespace {

constexpr std::size_t k_max_open_dirs = 64; // deeper subtrees are moved up instead
// Each pass goes k_max_open_dirs levels deeper; the cap bounds the work an attacker who keeps
// adding entries can cause.
constexpr int k_max_passes = 1024;

struct Frame
{
  DirStream dir;
  std::string name; // name of this directory inside the previous frame
};

class Remover
{
public:
  Remover(int top_fd, FileId top_id, std::string top_path, RemoveStats& stats,
          std::optional<std::chrono::steady_clock::time_point> deadline)
    : m_top_fd(top_fd), m_top_id(top_id), m_top_path(std::move(top_path)), m_stats(stats), m_deadline(deadline)
  {
  }

  bool out_of_time()
  {
    if (!m_deadline || (++m_ticks & 255U) != 0) {
      return m_timed_out;
    }
    m_timed_out = m_timed_out || std::chrono::steady_clock::now() >= *m_deadline;
    return m_timed_out;
  }
  bool timed_out() const { return m_timed_out; }

  // Empties the top directory; returns whether anything was removed or moved.
  bool empty_once()
  {
    std::uint64_t before = m_stats.removed + m_moved;
    DirStream top = open_dir_stream(m_top_fd); // each pass reads from the start
    if (!top) {
      record(Error::from_errno(m_top_path));
      return false;
    }
    m_stack.clear();
    m_stack.push_back(Frame{std::move(top), {}});
    while (!m_stack.empty()) {
      if (out_of_time()) {
        m_stack.clear();
        return false;
      }
      step();
    }
    return m_stats.removed + m_moved != before;
  }

  const std::optional<Error>& first_error() const { return m_first_error; }
  void record(Error e)
  {
    if (!m_first_error) {
      m_first_error = std::move(e);
    }
  }

private:
  std::string path_of(const std::string& name) const
  {
    std::string p = m_top_path;
    for (std::size_t i = 1; i < m_stack.size(); ++i) {
      p += "/" + m_stack[i].name;
    }
    return p + "/" + name;
  }

  void step()
  {
    Frame& frame = m_stack.back();
    errno = 0;
    struct dirent* e = ::readdir(frame.dir.get());
    if (!e) {
      if (errno != 0) {
        record(Error::from_errno(path_of("")));
      }
      std::string name = std::move(frame.name);
      m_stack.pop_back();
      if (!m_stack.empty()) {
        int parent = ::dirfd(m_stack.back().dir.get());
        if (::unlinkat(parent, name.c_str(), AT_REMOVEDIR) == 0) {
          ++m_stats.removed;
        } else if (errno != ENOENT) {
          record(Error::from_errno("cannot remove " + path_of(name)));
        }
      }
      return;
    }
    std::string name = e->d_name;
    if (name == "." || name == "..") {
      return;
    }
    int dfd = ::dirfd(frame.dir.get());
    if (e->d_type != DT_DIR && e->d_type != DT_UNKNOWN) {
      if (::unlinkat(dfd, name.c_str(), 0) == 0) {
        ++m_stats.removed;
        return;
      }
      if (errno == ENOENT) {
        return;
      }
      if (errno == EBUSY) { // a file bind-mounted over this one
        left_mount(name);
        return;
      }
      if (errno != EISDIR && errno != EPERM) { // EISDIR/EPERM: it became a directory meanwhile
        record(Error::from_errno("cannot remove " + path_of(name)));
        return;
      }
    }
    enter_directory(dfd, name);
  }

  void enter_directory(int dfd, const std::string& name)
  {
    // openat2(RESOLVE_NO_XDEV | RESOLVE_NO_SYMLINKS) refuses a mount point before the filesystem
    // mounted there is asked anything: a user's hung FUSE mount cannot hold us. No stat by name.
    auto child = open_beneath(dfd, name, O_RDONLY | O_DIRECTORY | O_NOCTTY);
    if (!child) {
      const int err = child.error().code;
      if (err == ENOENT) {
        return;
      }
      if (err == ELOOP || err == ENOTDIR) { // not a directory (any more): unlink the entry itself
        if (::unlinkat(dfd, name.c_str(), 0) == 0) {
          ++m_stats.removed;
        } else if (errno != ENOENT) {
          record(Error::from_errno("cannot remove " + path_of(name)));
        }
        return;
      }
      if (err == EXDEV) {
        left_mount(name);
        return;
      }
      record(Error{child.error().kind, err, "cannot open " + path_of(name) + ": " + std::strerror(err)});
      return;
    }
    auto id = file_id(child->get(), path_of(name));
    if (!id) {
      record(id.error());
      return;
    }
    if (!same_mount(*id, m_top_id)) { // kernels without openat2 reach here
      left_mount(name);
      return;
    }
    if (m_stack.size() >= k_max_open_dirs) {
      move_to_top(dfd, name);
      return;
    }
    DirStream d = dir_stream(std::move(*child));
    if (!d) {
      record(Error::from_errno("cannot read " + path_of(name)));
      return;
    }
    m_stack.push_back(Frame{std::move(d), name});
  }

  void left_mount(const std::string& name)
  {
    const std::string path = path_of(name);
    if (m_mounts_seen.insert(path).second) { // each pass meets it again
      ++m_stats.mounts_left;
    }
    record(Error{ErrorKind::io, EXDEV, path + " is a mount point: left in place"});
  }

  // Renames a deep subtree to the top directory so it is removed with few open fds.
  void move_to_top(int dfd, const std::string& name)
  {
    for (int attempt = 0; attempt < 1000; ++attempt) {
      std::string target = ".stagehand-deep-" + std::to_string(m_next_flat++);
      if (::renameat2(dfd, name.c_str(), m_top_fd, target.c_str(), RENAME_NOREPLACE) == 0) {
        ++m_moved;
        return;
      }
      if (errno != EEXIST) {
        record(Error::from_errno("cannot move " + path_of(name)));
        return;
      }
    }
    record(Error{ErrorKind::io, EEXIST, "cannot move " + path_of(name)});
  }

  int m_top_fd;
  FileId m_top_id;
  std::string m_top_path;
  RemoveStats& m_stats;
  std::vector<Frame> m_stack;
  std::set<std::string> m_mounts_seen;
  std::optional<Error> m_first_error;
  std::uint64_t m_moved = 0;
  std::uint64_t m_next_flat = 0;
  std::optional<std::chrono::steady_clock::time_point> m_deadline;
  std::uint64_t m_ticks = 0;
  bool m_timed_out = false;
};

Status remove_tree_impl(int parent_fd, const std::string& name, RemoveStats* stats_out,
                        std::optional<std::chrono::steady_clock::time_point> deadline)
{
  RemoveStats local;
  RemoveStats& stats = stats_out ? *stats_out : local;
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return Error::internal("remove_tree: bad name \"" + name + "\"");
  }
  auto top = open_beneath(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOCTTY);
  if (!top) {
    const int err = top.error().code;
    if (err == ENOENT) {
      return ok_status();
    }
    if (err == EXDEV) {
      ++stats.mounts_left;
      return Error{ErrorKind::io, EXDEV, name + " is a mount point: left in place"};
    }
    if (err != ELOOP && err != ENOTDIR) {
      return Error{top.error().kind, err, name + ": " + std::strerror(err)};
    }
    // A file, a symlink, or a directory swapped for one.
    if (::unlinkat(parent_fd, name.c_str(), 0) != 0 && errno != ENOENT) {
      return Error::from_errno("cannot remove " + name);
    }
    ++stats.removed;
    return ok_status();
  }
  auto parent_id = file_id(parent_fd, "parent of " + name);
  auto top_id = file_id(top->get(), name);
  if (!parent_id || !top_id) {
    return parent_id ? top_id.error() : parent_id.error();
  }
  if (!same_mount(*parent_id, *top_id)) {
    ++stats.mounts_left;
    return Error{ErrorKind::io, EXDEV, name + " is a mount point: left in place"};
  }

  Remover remover(top->get(), *top_id, name, stats, deadline);
  for (int pass = 0; pass < k_max_passes; ++pass) {
    bool progress = remover.empty_once();
    if (::unlinkat(parent_fd, name.c_str(), AT_REMOVEDIR) == 0) {
      ++stats.removed;
      return ok_status();
    }
    if (errno == ENOENT) {
      return ok_status();
    }
    if (errno != ENOTEMPTY && errno != EEXIST) {
      remover.record(Error::from_errno("cannot remove " + name));
      break;
    }
    if (remover.timed_out()) {
      return Error::io("removing " + name + ": time budget used up, the rest is left for later", ETIMEDOUT);
    }
    if (!progress) {
      break;
    }
  }
  if (remover.first_error()) {
    return *remover.first_error();
  }
  return Error{ErrorKind::io, ENOTEMPTY, "cannot remove " + name + ": entries keep appearing"};
}

} // namespace

Status remove_tree(int parent_fd, const std::string& name, RemoveStats* stats)
{
  return remove_tree_impl(parent_fd, name, stats, std::nullopt);
}

Status remove_tree_until(int parent_fd, const std::string& name, std::chrono::steady_clock::time_point deadline,
                         RemoveStats* stats)
{
  return remove_tree_impl(parent_fd, name, stats, deadline);
}

} // namespace stagehand::fs
