// Connect, send one frame, read frames until the result, with deadlines.
#include "stagehand/ipc/client.hpp"

#include "stagehand/fs/io.hpp"
#include "stagehand/proto/frame.hpp"
#include "stagehand/util/fd.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <thread>

namespace stagehand::ipc {

namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point until)
{
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
  return static_cast<int>(std::max<long long>(0, left));
}

Status wait_for(int fd, short events, Clock::time_point until, const char* what)
{
  for (;;) {
    struct pollfd p {fd, events, 0};
    int r = ::poll(&p, 1, ms_left(until));
    if (r > 0) {
      return ok_status();
    }
    if (r == 0) {
      return Error::io(std::string("no answer from the daemon in time (") + what + ")", ETIMEDOUT);
    }
    if (errno != EINTR) {
      return Error::from_errno("poll");
    }
  }
}

// Completes the non-blocking connect of `fd` to `addr` (the daemon's `socket_path`) by `until`.
Status connect_socket(int fd, const struct sockaddr_un& addr, const std::string& socket_path, Clock::time_point until)
{
  // A Unix socket's EAGAIN is a full queue of connections (a daemon stopped, or far behind), not a
  // connection under way: the socket is not connected, so asked again until the deadline.
  int rc = 0;
  while ((rc = ::connect(fd, reinterpret_cast<const struct sockaddr*>(&addr), sizeof addr)) != 0 && errno == EAGAIN) {
    if (Clock::now() >= until) {
      return Error::io(socket_path + ": the daemon's queue of connections is full (it is stopped, or far behind)",
                       EAGAIN);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (rc != 0) {
    if (errno != EINPROGRESS) {
      return Error::from_errno(socket_path);
    }
    if (auto st = wait_for(fd, POLLOUT, until, "connect"); !st) {
      return st.error();
    }
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      return Error::from_errno(socket_path, err);
    }
  }
  return ok_status();
}

// stagehandd always runs as root: whatever else listens at its path (a socket planted where a
// misconfigured directory let someone) is told nothing, and its answers are never believed.
Status check_peer_is_root(int fd, const std::string& socket_path)
{
  struct ucred peer {};
  socklen_t peer_len = sizeof peer;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &peer_len) != 0) {
    return Error::from_errno(socket_path + ": cannot read the peer's credentials");
  }
  if (peer.uid != 0) {
    return Error::refused(socket_path + " is served by uid " + std::to_string(peer.uid) +
                          ", not root: not stagehandd (nothing sent)");
  }
  return ok_status();
}

Status send_request(int fd, const std::string& frame, Clock::time_point until)
{
  std::size_t sent = 0;
  while (sent < frame.size()) {
    ssize_t n = ::send(fd, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (auto st = wait_for(fd, POLLOUT, until, "send"); !st) {
        return st.error();
      }
      continue;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
      break; // the daemon refused us at once (too many connections): its reason may be waiting
    }
    return Error::from_errno("cannot send to the daemon");
  }
  return ok_status();
}

// Reads frames until the result, passing progress frames to `progress`.
Result<proto::ReplyFrame> read_reply(int fd, const CallOptions& options, const ProgressSink& progress)
{
  proto::FrameReader reader(proto::k_max_response_bytes);
  char buf[65536];
  for (;;) {
    while (auto payload = reader.next()) {
      auto parsed = proto::parse_reply_frame(*payload);
      if (!parsed) {
        return parsed.error();
      }
      if (parsed->progress) {
        if (progress) {
          progress(*parsed->progress);
        }
        continue;
      }
      return parsed;
    }
    if (auto st = wait_for(fd, POLLIN, Clock::now() + options.idle_deadline, "reply"); !st) {
      return st.error();
    }
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      continue;
    }
    if (n < 0) {
      return Error::from_errno("cannot read the daemon's reply");
    }
    if (n == 0) {
      return Error::io("the daemon closed the connection without an answer", EPIPE);
    }
    if (auto st = reader.feed(buf, static_cast<std::size_t>(n)); !st) {
      return st.error();
    }
  }
}

} // namespace

Result<proto::ReplyFrame> call(const std::string& socket_path, const proto::Request& request,
                               const CallOptions& options, const ProgressSink& progress)
{
  struct sockaddr_un addr {};
  if (socket_path.size() >= sizeof addr.sun_path) {
    return Error::config("daemon socket path too long: " + socket_path);
  }
  auto payload = proto::serialize_checked(request); // before anything is asked of the daemon
  if (!payload) {
    return payload.error();
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) {
    return Error::from_errno("socket");
  }
  const auto connect_until = Clock::now() + options.connect_deadline;
  if (auto st = connect_socket(fd.get(), addr, socket_path, connect_until); !st) {
    return st.error();
  }
  if (auto st = check_peer_is_root(fd.get(), socket_path); !st) {
    return st.error();
  }
  if (auto st = send_request(fd.get(), proto::encode_frame(*payload), connect_until); !st) {
    return st.error();
  }
  return read_reply(fd.get(), options, progress);
}

} // namespace stagehand::ipc
