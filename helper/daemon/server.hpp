// The daemon's socket: accepts local connections, reads one length-prefixed request from each
// within a deadline, and hands it to a worker thread. Bounded everywhere: request size, connections
// (in all and per user), requests in flight. Random bytes, truncated or huge requests and idle
// connections get an error or a close and never stall anyone else. A request that finds the
// daemon busy waits its turn for a while (`queue_wait`); capacity is the daemon's problem, so the
// answer past that is "busy", on which every client goes on without the daemon.
#pragma once

#include "daemon.hpp"

#include "stagehand/util/fd.hpp"
#include "stagehand/util/result.hpp"

#include <atomic>
#include <chrono>
#include <map>
#include <mutex>
#include <string>

namespace stagehand::daemon {

struct ServerLimits
{
  std::size_t max_connections = 1024;     // open connections waiting for their request
  std::size_t max_per_uid = 64;           // of which one non-root user may hold
  std::size_t max_in_flight = 64;         // requests being handled at once (root is never refused)
  std::size_t max_in_flight_per_uid = 16; // of which one non-root user may have
  std::chrono::milliseconds request_deadline{5000}; // from accept to a complete request
  // A request past the in-flight limits waits its turn this long (first come, first served,
  // within each user's share), then gets a `limit` error: its client stages without the cache.
  std::chrono::milliseconds queue_wait{10000};
};

// Limits that fit in `open_files` descriptors (the daemon may run under `ulimit -n 256`): each
// connection holds one, each request in flight a dozen or so (job directory, source, child
// sockets, pipes), and the daemon keeps some for itself (state, cache, logs).
ServerLimits limits_within(std::uint64_t open_files);

// Creates the socket at `path`: its directory must resolve through root-owned directories and not
// be writable by others (created 0755 if missing); a stale socket file is replaced; the socket is
// connectable by every local user (0666).
Result<UniqueFd> listen_socket(const std::string& path);

struct Conn; // a connection the server reads (server.cpp)

class Server
{
public:
  Server(Daemon& daemon, UniqueFd listen_fd, ServerLimits limits = {});
  // Serves until a SIGTERM/SIGINT arrives on `signal_fd`; SIGHUP calls `on_reload`.
  void run(int signal_fd, const std::function<void()>& on_reload);
  std::size_t in_flight() const { return m_in_flight.load(); }

private:
  std::size_t in_flight_of(uid_t uid);
  // Whether a request of `uid` may start now (root always may).
  bool has_room(uid_t uid, bool root);
  // Runs `payload` on a worker thread that owns `conn` (answered busy when no thread can start).
  void start(Conn conn, std::string payload);
  Error busy(); // what a request that waited in vain is told
  // Parts of run(), over its loop's state (server.cpp).
  struct Loop;
  // Accepts every connection waiting (refused past the connection limits).
  void accept_all(Loop& loop);
  // Reads what connection `fd` sent; a whole request starts, or waits its turn when there is no room.
  void read_request(Loop& loop, int fd);
  // Starts the waiting requests, oldest first, each as soon as its user's share and the whole have room.
  void start_waiting(Loop& loop);
  // Refuses the connections past their deadline: no whole request in time, or no turn within queue_wait.
  void drop_late(Loop& loop);

  Daemon& m_daemon;
  UniqueFd m_listen;
  ServerLimits m_limits;
  std::atomic<std::size_t> m_in_flight{0};
  UniqueFd m_wake; // eventfd: a worker finished, queued requests may start
  std::mutex m_uid_mutex;
  std::map<uid_t, std::size_t> m_in_flight_by_uid;
};

} // namespace stagehand::daemon
