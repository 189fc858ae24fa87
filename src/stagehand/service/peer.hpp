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

// Where a job's work that the daemon's children do for it runs: the CPUs of the process that asked
// (its task, or its step's slurmstepd: Slurm's task plugin or the job's cpuset confines them) that
// the daemon may use too. Empty (no confinement: where the daemon runs) when that is all of the
// daemon's, when they share none, or when the asker is gone or its pid is no longer the peer's
// user's (reused): a job's work never lands on another job's cores through a reused pid.
std::vector<int> job_cpus(const Peer& peer);

// Whether the client of connection `fd` has closed it: no client waits for an answer. (A client
// that only shut down its writing, as socat does, still reads: it has not.)
bool client_gone(int fd);

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
  bool client_gone() const { return service::client_gone(m_fd); }

private:
  void send(const std::string& payload);

  int m_fd;
  std::chrono::milliseconds m_deadline;
  bool m_broken = false;
  std::mutex m_mutex;
};

} // namespace stagehand::service
