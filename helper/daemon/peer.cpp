// Reply frames with a write deadline.
#include "peer.hpp"

#include "stagehand/proto/frame.hpp"

#include <poll.h>
#include <sys/socket.h>

namespace stagehand::daemon {

void Responder::send(const std::string& payload)
{
  std::lock_guard lock(m_mutex);
  if (m_broken) {
    return;
  }
  const std::string frame = proto::encode_frame(payload);
  const auto until = std::chrono::steady_clock::now() + m_deadline;
  std::size_t sent = 0;
  while (sent < frame.size()) {
    ssize_t n = ::send(m_fd, frame.data() + sent, frame.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && errno == EAGAIN) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      struct pollfd p {m_fd, POLLOUT, 0};
      if (left.count() > 0 && ::poll(&p, 1, static_cast<int>(left.count())) > 0) {
        continue;
      }
    }
    m_broken = true;
    return;
  }
}

void Responder::progress(const proto::Progress& p) { send(proto::serialize_progress(p)); }
void Responder::result(const proto::Reply& r) { send(proto::serialize_result(r)); }
void Responder::error(const Error& e) { send(proto::serialize_error(e)); }

} // namespace stagehand::daemon
