// Who called (SO_PEERCRED / SO_PEERGROUPS), and reply frames with a write deadline.
#include "stagehand/service/peer.hpp"

#include "stagehand/proto/frame.hpp"
#include "stagehand/util/cpu_list.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <string>

namespace stagehand::service {

Peer peer_of(int fd)
{
  Peer p;
  struct ucred cred {};
  socklen_t len = sizeof cred;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0) {
    p.pid = cred.pid;
    p.uid = cred.uid;
    p.gid = cred.gid;
  } else {
    p.uid = static_cast<uid_t>(-1); // unknown: treated as nobody
    p.gid = static_cast<gid_t>(-1);
  }
  std::vector<gid_t> groups(256);
  for (int attempt = 0; attempt < 2; ++attempt) {
    len = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &len) == 0) {
      groups.resize(len / sizeof(gid_t));
      p.groups = std::move(groups);
      break;
    }
    if (errno != ERANGE) {
      break;
    }
    groups.resize(len / sizeof(gid_t) + 1); // the kernel said how many there are
  }
  return p;
}

std::vector<int> job_cpus(const Peer& peer)
{
  if (peer.pid <= 0) {
    return {};
  }
  const std::vector<int> theirs = affinity_of(peer.pid);
  // Read after the affinity: a pid reused before that read is found here (another owner).
  struct stat st {};
  const std::string proc = "/proc/" + std::to_string(peer.pid);
  if (theirs.empty() || ::stat(proc.c_str(), &st) != 0 || st.st_uid != peer.uid) {
    return {};
  }
  const std::vector<int> mine = affinity_of(::getpid());
  std::vector<int> both;
  std::set_intersection(theirs.begin(), theirs.end(), mine.begin(), mine.end(), std::back_inserter(both));
  return both == mine ? std::vector<int>{} : both;
}

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

} // namespace stagehand::service
