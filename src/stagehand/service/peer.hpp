// Who is on the other end of a daemon connection (SO_PEERCRED / SO_PEERGROUPS), and the channel
// a request's handler answers on (reply frames, each with a write deadline).
#pragma once

#include "stagehand/proto/messages.hpp"
#include "stagehand/util/result.hpp"

#include <sys/types.h>

#include <chrono>
#include <mutex>
#include <vector>

namespace stagehand::service {

struct Peer
{
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups; // the peer's supplementary groups, as the kernel reports them
  bool root() const { return uid == 0; }
};

// The credentials of the process at the other end of the connected Unix socket `fd`, as the kernel
// recorded them at connect; unreadable credentials make the peer uid and gid -1 (nobody).
Peer peer_of(int fd);

// Writes reply frames to one client, each within a deadline; a client that stops reading is
// dropped (later frames are discarded), never waited on forever.
class Responder
{
public:
  explicit Responder(int fd, std::chrono::milliseconds write_deadline = std::chrono::milliseconds{10000})
    : m_fd(fd), m_deadline(write_deadline)
  {
  }
  void progress(const proto::Progress& p);
  void result(const proto::Reply& r);
  void error(const Error& e);
  bool broken() const { return m_broken; }

private:
  void send(const std::string& payload);

  int m_fd;
  std::chrono::milliseconds m_deadline;
  bool m_broken = false;
  std::mutex m_mutex;
};

} // namespace stagehand::service
