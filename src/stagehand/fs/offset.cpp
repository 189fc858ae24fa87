// A descriptor's offset from /proc/self/fdinfo (see offset.hpp).
#include "stagehand/fs/offset.hpp"

#include "stagehand/util/fd.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstring>

namespace stagehand::fs {

std::uint64_t file_offset(int fd)
{
  char path[48];
  std::snprintf(path, sizeof path, "/proc/self/fdinfo/%d", fd);
  UniqueFd info(::open(path, O_RDONLY | O_CLOEXEC));
  char buf[128]; // "pos:\t<offset>\n" comes first
  const ssize_t n = info.valid() ? ::read(info.get(), buf, sizeof buf) : -1;
  if (n > 4 && std::memcmp(buf, "pos:", 4) == 0) {
    const char* at = buf + 4;
    const char* end = buf + n;
    while (at < end && (*at == ' ' || *at == '\t')) {
      ++at;
    }
    std::uint64_t pos = 0;
    if (std::from_chars(at, end, pos).ec == std::errc{}) {
      return pos;
    }
  }
  const off_t at = ::lseek(fd, 0, SEEK_CUR);
  return at > 0 ? static_cast<std::uint64_t>(at) : 0;
}

} // namespace stagehand::fs
