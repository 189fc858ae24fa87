// Directory streams over fds.
#include "stagehand/fs/dir_stream.hpp"

#include <fcntl.h>

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

} // namespace stagehand::fs
