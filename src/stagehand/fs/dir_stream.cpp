// Directory streams over fds.
#include "stagehand/fs/dir_stream.hpp"

#include <fcntl.h>

#include <cerrno>
#include <string_view>

namespace stagehand::fs {

DirStream dir_stream(UniqueFd fd)
{
  if (!fd.valid()) {
    return nullptr;
  }
  DIR* d = ::fdopendir(fd.get());
  if (d) {
    fd.release();
  }
  return DirStream(d);
}

DirStream open_dir_stream(int dir_fd)
{
  return dir_stream(UniqueFd(::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)));
}

Result<std::vector<std::string>> list_names(int dir_fd, const std::string& shown)
{
  DirStream d = open_dir_stream(dir_fd);
  if (!d) {
    return Error::from_errno(shown);
  }
  std::vector<std::string> names;
  errno = 0;
  while (struct dirent* e = ::readdir(d.get())) {
    std::string_view n = e->d_name;
    if (n != "." && n != "..") {
      names.emplace_back(n);
    }
    errno = 0;
  }
  if (errno != 0) {
    return Error::from_errno(shown);
  }
  return names;
}

} // namespace stagehand::fs
