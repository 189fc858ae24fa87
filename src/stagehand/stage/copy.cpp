// File and tree copies: fd-relative, O_NOFOLLOW, copy_file_range first.
#include "stagehand/stage/copy.hpp"

#include "stagehand/fs/tree_copy.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/fs/io.hpp"
#include "stagehand/util/fd.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <span>
#include <vector>

namespace stagehand::stage {

namespace {

// Copies until EOF with one method; returns false (nothing copied) if the method is unsupported.
// A pipe (the daemon's delivery of a miss) is spliced: copy_file_range and sendfile refuse one,
// and a read/write copy of a tiny file would pay for its buffer's pages.
enum class Method { copy_file_range, sendfile, splice, read_write };

Result<bool> copy_with(Method m, int in, int out, std::uint64_t& copied, std::uint64_t limit, archive::WorkCounters* counters)
{
  constexpr std::size_t k_buffer = 1U << 20;
  std::unique_ptr<char[]> buf; // not zeroed: only the pages a read fills are touched
  for (;;) {
    const std::size_t chunk = 1U << 24;
    ssize_t n = 0;
    switch (m) {
    case Method::copy_file_range:
      n = ::copy_file_range(in, nullptr, out, nullptr, chunk, 0);
      break;
    case Method::sendfile:
      n = ::sendfile(out, in, nullptr, chunk);
      break;
    case Method::splice:
      n = fs::splice_some(in, out, chunk);
      break;
    case Method::read_write: {
      if (!buf) {
        buf = std::make_unique_for_overwrite<char[]>(k_buffer);
      }
      auto got = fs::read_some(in, buf.get(), k_buffer, "");
      if (!got) {
        return got.error();
      }
      if (auto st = fs::write_all(out, std::string_view(buf.get(), *got), ""); !st) {
        return st.error();
      }
      n = static_cast<ssize_t>(*got);
      break;
    }
    }
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      if (copied == 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
        return false;
      }
      return Error::from_errno("cannot copy");
    }
    if (n == 0) {
      return true;
    }
    copied += static_cast<std::uint64_t>(n);
    if (counters) {
      counters->bytes.fetch_add(static_cast<std::uint64_t>(n), std::memory_order_relaxed);
    }
    if (copied > limit) {
      return Error::limit("more than " + std::to_string(limit) + " bytes (limit)");
    }
  }
}

// Copies the data of `src_fd` into the new, empty file `out_fd`, then its mode and mtime.
Status copy_contents(int src_fd, int out_fd, std::uint64_t max_bytes, CopyStats& stats)
{
  struct stat st {};
  if (::fstat(src_fd, &st) != 0) {
    return Error::from_errno("cannot stat");
  }
  const std::uint64_t room = max_bytes > stats.bytes ? max_bytes - stats.bytes : 0;
  std::uint64_t copied = 0;
  static constexpr Method k_file[] = {Method::copy_file_range, Method::sendfile, Method::read_write};
  static constexpr Method k_pipe[] = {Method::splice, Method::read_write};
  for (Method m : S_ISFIFO(st.st_mode) ? std::span<const Method>(k_pipe) : std::span<const Method>(k_file)) {
    auto done = copy_with(m, src_fd, out_fd, copied, room, stats.counters);
    if (!done) {
      return done.error();
    }
    if (*done) {
      break;
    }
  }
  stats.bytes += copied;
  ++stats.files;
  if (stats.counters) {
    stats.counters->entries.fetch_add(1, std::memory_order_relaxed);
  }
  if (::fchmod(out_fd, st.st_mode & 0777) != 0) {
    return Error::from_errno("cannot set the mode of the copy");
  }
  keep_mtime(out_fd, st);
  return ok_status();
}

// copy_file without naming the source: its caller does.
Status copy_regular(int src_fd, int dest_dir_fd, const std::string& name, std::uint64_t max_bytes, CopyStats& stats)
{
  struct stat st {};
  if (::fstat(src_fd, &st) != 0) {
    return Error::from_errno("cannot stat");
  }
  UniqueFd out(::openat(dest_dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        (st.st_mode & 0777) | S_IWUSR));
  if (!out.valid()) {
    return Error::from_errno("cannot create the copy");
  }
  return copy_contents(src_fd, out.get(), max_bytes, stats);
}

// A regular file of the tree, opened once without blocking or following: the type is decided on
// the descriptor, so a FIFO or symlink swapped in after the walk listed it is never opened for real.
Status copy_tree_file(const fs::WalkEntry& e, int dest_parent, std::uint64_t max_bytes, CopyStats& stats)
{
  UniqueFd in(::openat(e.parent_fd, e.name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  struct stat st {};
  if (!in.valid() || ::fstat(in.get(), &st) != 0) {
    return Error::from_errno(e.rel);
  }
  if (!S_ISREG(st.st_mode)) {
    ++stats.skipped_special; // swapped for something else meanwhile: not a file to stage
    return ok_status();
  }
  ::fcntl(in.get(), F_SETFL, ::fcntl(in.get(), F_GETFL) & ~O_NONBLOCK);
  if (auto s = copy_regular(in.get(), dest_parent, e.name, max_bytes, stats); !s) {
    return s.error().with_context(e.rel);
  }
  return ok_status();
}

Status copy_tree_symlink(const fs::WalkEntry& e, int dest_parent, CopyStats& stats)
{
  std::string target(static_cast<std::size_t>(e.st.st_size > 0 ? e.st.st_size : 4096) + 1, '\0');
  ssize_t n = ::readlinkat(e.parent_fd, e.name.c_str(), target.data(), target.size());
  if (n < 0) {
    return Error::from_errno(e.rel);
  }
  target.resize(static_cast<std::size_t>(n));
  if (::symlinkat(target.c_str(), dest_parent, e.name.c_str()) != 0) {
    return Error::from_errno("cannot create " + e.rel);
  }
  ++stats.symlinks;
  return ok_status();
}

// copy_tree without naming the source: errors name paths below its root. One walk (fs::copy_walk)
// with bounded descriptors whatever the shape; the root's mode and times are set last too.
Status copy_tree_below(int src_dir_fd, int dest_dir_fd, std::uint64_t max_bytes, CopyStats& stats)
{
  struct stat root_st {};
  if (::fstat(src_dir_fd, &root_st) != 0) {
    return Error::from_errno("cannot read the directory");
  }
  auto walked = fs::copy_walk(src_dir_fd, dest_dir_fd, "", [&](const fs::WalkEntry& e, int dest_parent) -> Result<fs::Placed> {
    Status st = ok_status();
    if (S_ISDIR(e.st.st_mode)) {
      if (::mkdirat(dest_parent, e.name.c_str(), 0700) != 0) {
        return Error::from_errno("cannot create " + e.rel);
      }
      ++stats.dirs;
      return fs::Placed::directory;
    }
    if (S_ISREG(e.st.st_mode)) {
      st = copy_tree_file(e, dest_parent, max_bytes, stats);
    } else if (S_ISLNK(e.st.st_mode)) {
      st = copy_tree_symlink(e, dest_parent, stats);
    } else {
      ++stats.skipped_special;
    }
    if (!st) {
      return st.error();
    }
    return fs::Placed::other;
  }, finish_dir);
  if (!walked) {
    return walked;
  }
  finish_dir(dest_dir_fd, root_st); // the root after everything below it
  return ok_status();
}

} // namespace

void keep_mtime(int fd, const struct stat& st)
{
  struct timespec times[2] = {{0, UTIME_OMIT}, st.st_mtim};
  ::futimens(fd, times);
}

void finish_dir(int fd, const struct stat& st)
{
  ::fchmod(fd, (st.st_mode & 0777) | S_IRWXU);
  keep_mtime(fd, st);
}

Status copy_file(int src_fd, int dest_dir_fd, const std::string& name, std::uint64_t max_bytes, CopyStats& stats,
                 const std::string& shown)
{
  if (auto st = copy_regular(src_fd, dest_dir_fd, name, max_bytes, stats); !st) {
    return st.error().with_context(shown);
  }
  return ok_status();
}

Status copy_into(int src_fd, int out_fd, std::uint64_t max_bytes, CopyStats& stats, const std::string& shown)
{
  if (auto st = copy_contents(src_fd, out_fd, max_bytes, stats); !st) {
    return st.error().with_context(shown);
  }
  return ok_status();
}

Status copy_tree(int src_dir_fd, int dest_dir_fd, std::uint64_t max_bytes, CopyStats& stats, const std::string& shown)
{
  if (auto st = copy_tree_below(src_dir_fd, dest_dir_fd, max_bytes, stats); !st) {
    return st.error().with_context(shown);
  }
  return ok_status();
}

} // namespace stagehand::stage
