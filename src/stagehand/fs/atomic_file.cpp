// write temp + fsync + rename + fsync(dir).
#include "stagehand/fs/atomic_file.hpp"

#include "stagehand/fs/io.hpp"
#include "stagehand/util/fd.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>

namespace stagehand::fs {

Status write_file_atomic(int dir_fd, const std::string& name, std::string_view data, mode_t mode,
                         Durability durability)
{
  static std::atomic<unsigned> counter{0};
  const std::string tmp = "." + name + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
  UniqueFd fd(::openat(dir_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd.valid()) {
    return Error::from_errno("cannot create " + tmp);
  }
  auto fail = [&](Error e) {
    ::unlinkat(dir_fd, tmp.c_str(), 0);
    return e;
  };
  if (auto st = write_all(fd.get(), data, tmp); !st) {
    return fail(st.error());
  }
  if (::fchmod(fd.get(), mode) != 0) {
    return fail(Error::from_errno("cannot set the mode of " + tmp));
  }
  if (durability == Durability::fsync && ::fsync(fd.get()) != 0) {
    return fail(Error::from_errno("cannot sync " + tmp));
  }
  fd.reset();
  if (::renameat(dir_fd, tmp.c_str(), dir_fd, name.c_str()) != 0) {
    return fail(Error::from_errno("cannot rename " + tmp + " to " + name));
  }
  if (durability == Durability::fsync && ::fsync(dir_fd) != 0) {
    return Error::from_errno("cannot sync the directory of " + name);
  }
  return ok_status();
}

Result<std::string> read_small_file(int dir_fd, const std::string& name, std::size_t max_bytes)
{
  UniqueFd fd(::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  if (!fd.valid()) {
    return Error::from_errno(name);
  }
  return read_all(fd.get(), name, max_bytes);
}

} // namespace stagehand::fs
