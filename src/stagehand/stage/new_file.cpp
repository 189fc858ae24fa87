// write_new_file: create (or replace), write through fs::pwrite_all, size, mode, mtime.
#include "stagehand/stage/new_file.hpp"

#include "stagehand/fs/io.hpp"
#include "stagehand/util/fd.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>

namespace stagehand::stage {

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

Status make_room(int parent, const std::string& name, const std::string& shown)
{
  struct stat st {};
  if (::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return ok_status();
  }
  if (S_ISDIR(st.st_mode)) {
    return Error::refused("entry \"" + shown + "\" would replace a directory: refused", EISDIR);
  }
  if (::unlinkat(parent, name.c_str(), 0) != 0) {
    return Error::from_errno("cannot replace " + shown);
  }
  return ok_status();
}

Status write_new_file(int parent, const std::string& name, const std::string& shown, const FileMeta& meta,
                      const std::function<Status(const BlockSink&)>& fill)
{
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  UniqueFd fd(::openat(parent, name.c_str(), flags, meta.mode));
  if (!fd.valid() && errno == EEXIST) { // a later entry of the same name replaces the earlier
    if (auto st = make_room(parent, name, shown); !st) {
      return st;
    }
    fd.reset(::openat(parent, name.c_str(), flags, meta.mode));
  }
  if (!fd.valid()) {
    return Error::from_errno("cannot create " + shown);
  }
  std::uint64_t end = 0;
  auto written = fill([&](const char* data, std::size_t len, std::uint64_t offset) -> Status {
    end = std::max(end, offset + len);
    return fs::pwrite_all(fd.get(), data, len, offset, shown);
  });
  if (!written) {
    return written;
  }
  if (meta.size > end && ::ftruncate(fd.get(), static_cast<off_t>(meta.size)) != 0) { // a sparse tail
    return Error::from_errno("cannot write " + shown);
  }
  if ((meta.mode & current_umask()) != 0 && ::fchmod(fd.get(), meta.mode) != 0) {
    return Error::from_errno("cannot set the mode of " + shown);
  }
  struct timespec times[2] = {{0, UTIME_OMIT}, meta.mtime};
  ::futimens(fd.get(), times);
  return ok_status();
}

} // namespace stagehand::stage
