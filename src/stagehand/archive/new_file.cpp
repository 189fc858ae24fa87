// write_new_file: create (or replace), write through fs::pwrite_all, size, mode, mtime.
#include "stagehand/archive/new_file.hpp"

#include "stagehand/fs/io.hpp"
#include "stagehand/util/fd.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

namespace stagehand::archive {

mode_t current_umask()
{
  static const mode_t um = [] {
    mode_t value = 022;
    if (FILE* f = std::fopen("/proc/self/status", "re")) {
      char line[256];
      while (std::fgets(line, sizeof line, f)) {
        unsigned v = 0;
        if (std::sscanf(line, "Umask: %o", &v) == 1) {
          value = static_cast<mode_t>(v);
          break;
        }
      }
      std::fclose(f);
    }
    return value;
  }();
  return um;
}

Status make_room(int parent, const char* name, std::string_view shown)
{
  struct stat st {};
  if (::fstatat(parent, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return ok_status();
  }
  if (S_ISDIR(st.st_mode)) {
    return Error::refused("entry \"" + std::string(shown) + "\" would replace a directory: refused", EISDIR);
  }
  if (::unlinkat(parent, name, 0) != 0) {
    return Error::from_errno("cannot replace " + std::string(shown));
  }
  return ok_status();
}

namespace {

// A fresh file: O_EXCL|O_NOFOLLOW, an entry already at `name` removed first (never written through).
Result<UniqueFd> create_fresh(int parent, const char* name, std::string_view shown, mode_t mode)
{
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  UniqueFd fd(::openat(parent, name, flags, mode));
  if (!fd.valid() && errno == EEXIST) { // a later entry of the same name replaces the earlier
    if (auto st = make_room(parent, name, shown); !st) {
      return st.error();
    }
    fd.reset(::openat(parent, name, flags, mode));
  }
  if (!fd.valid()) {
    return Error::from_errno("cannot create " + std::string(shown));
  }
  return fd;
}

// After the data (which ended at `end`): a sparse tail, the mode the umask took away, the mtime.
Status finish_file(int fd, std::string_view shown, const FileMeta& meta, std::uint64_t end)
{
  if (meta.size > end && ::ftruncate(fd, static_cast<off_t>(meta.size)) != 0) { // a sparse tail
    return Error::from_errno("cannot write " + std::string(shown));
  }
  if ((meta.mode & current_umask()) != 0 && ::fchmod(fd, meta.mode) != 0) {
    return Error::from_errno("cannot set the mode of " + std::string(shown));
  }
  struct timespec times[2] = {{0, UTIME_OMIT}, meta.mtime};
  ::futimens(fd, times);
  return ok_status();
}

} // namespace

Status write_new_file(int parent, const char* name, std::string_view shown, const FileMeta& meta,
                      const std::function<Status(const BlockSink&)>& fill)
{
  auto fd = create_fresh(parent, name, shown, meta.mode);
  if (!fd) {
    return fd.error();
  }
  std::uint64_t end = 0;
  auto written = fill([&](const char* data, std::size_t len, std::uint64_t offset) -> Status {
    end = std::max(end, offset + len);
    return fs::pwrite_all(fd->get(), data, len, offset, shown);
  });
  if (!written) {
    return written;
  }
  return finish_file(fd->get(), shown, meta, end);
}

Status write_new_file(int parent, const char* name, std::string_view shown, const FileMeta& meta,
                      std::string_view data)
{
  auto fd = create_fresh(parent, name, shown, meta.mode);
  if (!fd) {
    return fd.error();
  }
  if (auto st = fs::pwrite_all(fd->get(), data.data(), data.size(), 0, shown); !st) {
    return st;
  }
  return finish_file(fd->get(), shown, meta, data.size());
}

} // namespace stagehand::archive
