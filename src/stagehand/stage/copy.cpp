// File and tree copies: fd-relative, O_NOFOLLOW, copy_file_range first.
#include "stagehand/stage/copy.hpp"

#include "stagehand/fs/dir_stream.hpp"
#include "stagehand/util/fd.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <memory>
#include <vector>

namespace stagehand::stage {

namespace {

// Copies until EOF with one method; returns false (nothing copied) if the method is unsupported.
enum class Method { copy_file_range, sendfile, read_write };

Result<bool> copy_with(Method m, int in, int out, std::uint64_t& copied, std::uint64_t limit)
{
  std::vector<char> buf;
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
    case Method::read_write: {
      buf.resize(1U << 20);
      n = ::read(in, buf.data(), buf.size());
      for (ssize_t done = 0; n > 0 && done < n;) {
        ssize_t w = ::write(out, buf.data() + done, static_cast<std::size_t>(n - done));
        if (w < 0) {
          if (errno == EINTR) {
            continue;
          }
          return Error::from_errno("write");
        }
        done += w;
      }
      break;
    }
    }
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      if (copied == 0 && m != Method::read_write &&
          (errno == EXDEV || errno == ENOSYS || errno == EINVAL || errno == EOPNOTSUPP)) {
        return false;
      }
      return Error::from_errno("copy");
    }
    if (n == 0) {
      return true;
    }
    copied += static_cast<std::uint64_t>(n);
    if (copied > limit) {
      return Error{EFBIG, "more than " + std::to_string(limit) + " bytes (limit)"};
    }
  }
}

struct Frame
{
  fs::DirStream src;
  UniqueFd dest;
  std::string shown;
  struct stat st; // the source directory's, for mode and mtime at the end
};

void set_times(int fd, const struct stat& st)
{
  struct timespec times[2] = {{0, UTIME_OMIT}, st.st_mtim};
  ::futimens(fd, times);
}

} // namespace

Status copy_file(int src_fd, int dest_dir_fd, const std::string& name, std::uint64_t max_bytes, CopyStats& stats,
                 const std::string& shown)
{
  struct stat st {};
  if (::fstat(src_fd, &st) != 0) {
    return Error::from_errno(shown);
  }
  const mode_t mode = st.st_mode & 0777;
  UniqueFd out(::openat(dest_dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode | S_IWUSR));
  if (!out.valid()) {
    return Error::from_errno("cannot create " + name);
  }
  const std::uint64_t room = max_bytes > stats.bytes ? max_bytes - stats.bytes : 0;
  std::uint64_t copied = 0;
  for (Method m : {Method::copy_file_range, Method::sendfile, Method::read_write}) {
    auto done = copy_with(m, src_fd, out.get(), copied, room);
    if (!done) {
      return Error{done.error().code, shown + ": " + done.error().message};
    }
    if (*done) {
      break;
    }
  }
  stats.bytes += copied;
  ++stats.files;
  if (::fchmod(out.get(), mode) != 0) {
    return Error::from_errno("cannot set the mode of " + name);
  }
  set_times(out.get(), st);
  return ok_status();
}

Status copy_tree(int src_dir_fd, int dest_dir_fd, std::uint64_t max_bytes, CopyStats& stats, const std::string& shown)
{
  std::vector<Frame> stack;
  std::vector<std::pair<UniqueFd, struct stat>> dir_times;
  auto push = [&](int src_fd, UniqueFd dest, std::string path) -> Status {
    fs::DirStream d = fs::open_dir_stream(src_fd);
    if (!d) {
      return Error::from_errno(path);
    }
    Frame f{std::move(d), std::move(dest), std::move(path), {}};
    ::fstat(::dirfd(f.src.get()), &f.st);
    stack.push_back(std::move(f));
    return ok_status();
  };
  UniqueFd top(::fcntl(dest_dir_fd, F_DUPFD_CLOEXEC, 0));
  if (auto st = push(src_dir_fd, std::move(top), shown); !st) {
    return st;
  }
  while (!stack.empty()) {
    Frame& f = stack.back();
    errno = 0;
    struct dirent* e = ::readdir(f.src.get());
    if (!e) {
      if (errno != 0) {
        return Error::from_errno(f.shown);
      }
      dir_times.emplace_back(std::move(f.dest), f.st);
      stack.pop_back();
      continue;
    }
    std::string name = e->d_name;
    if (name == "." || name == "..") {
      continue;
    }
    const int sfd = ::dirfd(f.src.get());
    const int dfd = f.dest.get();
    const std::string path = f.shown + "/" + name;
    struct stat st {};
    if (::fstatat(sfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return Error::from_errno(path);
    }
    if (S_ISDIR(st.st_mode)) {
      if (::mkdirat(dfd, name.c_str(), 0700) != 0) {
        return Error::from_errno("cannot create " + path);
      }
      UniqueFd sub_src(::openat(sfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      UniqueFd sub_dest(::openat(dfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!sub_src.valid() || !sub_dest.valid()) {
        return Error::from_errno(path);
      }
      ++stats.dirs;
      if (auto s = push(sub_src.get(), std::move(sub_dest), path); !s) {
        return s;
      }
    } else if (S_ISREG(st.st_mode)) {
      UniqueFd in(::openat(sfd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY));
      if (!in.valid()) {
        return Error::from_errno(path);
      }
      if (auto s = copy_file(in.get(), dfd, name, max_bytes, stats, path); !s) {
        return s;
      }
    } else if (S_ISLNK(st.st_mode)) {
      std::string target(static_cast<std::size_t>(st.st_size > 0 ? st.st_size : 4096) + 1, '\0');
      ssize_t n = ::readlinkat(sfd, name.c_str(), target.data(), target.size());
      if (n < 0) {
        return Error::from_errno(path);
      }
      target.resize(static_cast<std::size_t>(n));
      if (::symlinkat(target.c_str(), dfd, name.c_str()) != 0) {
        return Error::from_errno("cannot create " + path);
      }
      ++stats.symlinks;
    } else {
      ++stats.skipped_special;
    }
  }
  // Directory modes and times last, deepest first (they were recorded in post-order).
  for (auto& [fd, st] : dir_times) {
    ::fchmod(fd.get(), (st.st_mode & 0777) | S_IRWXU);
    set_times(fd.get(), st);
  }
  return ok_status();
}

} // namespace stagehand::stage
