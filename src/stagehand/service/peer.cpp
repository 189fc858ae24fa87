// Who called (SO_PEERCRED / SO_PEERGROUPS), and reply frames with a write deadline.
#include "stagehand/service/peer.hpp"

#include "stagehand/fs/io.hpp"
#include "stagehand/proto/frame.hpp"
#include "stagehand/util/cpu_list.hpp"

#include <spdlog/spdlog.h>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <iterator>
#include <optional>
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

namespace {

// The effective uid of process `pid` (/proc/PID/status's "Uid:" line, whatever its dumpable state;
// SO_PEERCRED reports the effective uid too), or nullopt.
std::optional<uid_t> effective_uid_of(pid_t pid)
{
  auto text = fs::read_file("/proc/" + std::to_string(pid) + "/status", 64U << 10);
  const auto at = text ? text->find("\nUid:") : std::string::npos;
  if (at == std::string::npos) {
    return std::nullopt;
  }
  char* end = nullptr;
  (void)std::strtoul(text->c_str() + at + 5, &end, 10); // real
  const unsigned long effective = std::strtoul(end, &end, 10);
  return static_cast<uid_t>(effective);
}

} // namespace

std::vector<int> job_cpus(const Peer& peer)
{
  if (peer.pid <= 0) {
    return {};
  }
  const std::vector<int> theirs = affinity_of(peer.pid);
  // Read after the affinity: a pid reused before that read is found here (another user's).
  if (theirs.empty() || effective_uid_of(peer.pid) != peer.uid) {
    spdlog::debug("pid {}: its CPUs not read, or it is no longer uid {}'s: its work not placed", peer.pid, peer.uid);
    return {};
  }
  const std::vector<int> mine = affinity_of(::getpid());
  std::vector<int> both;
  std::set_intersection(theirs.begin(), theirs.end(), mine.begin(), mine.end(), std::back_inserter(both));
  return both == mine ? std::vector<int>{} : both;
}

bool client_gone(int fd)
{
  struct pollfd p {fd, 0, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLHUP | POLLERR)) != 0;
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
