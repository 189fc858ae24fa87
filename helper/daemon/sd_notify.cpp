// sd_notify over AF_UNIX datagrams (sd_notify(3)), abstract sockets included.
#include "sd_notify.hpp"

#include "stagehand/util/fd.hpp"

#include <sys/socket.h>
#include <sys/un.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>

namespace stagehand::daemon {

void sd_notify(const std::string& state)
{
  const char* path = std::getenv("NOTIFY_SOCKET");
  if (!path || (path[0] != '/' && path[0] != '@')) {
    return;
  }
  struct sockaddr_un addr {};
  const std::size_t len = std::strlen(path);
  if (len >= sizeof addr.sun_path) {
    return;
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path, len);
  if (path[0] == '@') {
    addr.sun_path[0] = '\0';
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) {
    return;
  }
  (void)::sendto(fd.get(), state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<struct sockaddr*>(&addr),
                 static_cast<socklen_t>(offsetof(struct sockaddr_un, sun_path) + len));
}

} // namespace stagehand::daemon
