// The daemon's socket: accepts local connections, reads one length-prefixed request from each
// within a deadline, and hands it to a worker thread, where a handler (the daemon's, or a test's)
// answers it. Bounded everywhere: request size, connections (in all and per user), requests in
// flight. Random bytes, truncated or huge requests and idle connections get an error or a close and
// never stall anyone else. A request that finds the server busy waits its turn for a while
// (`queue_wait`); capacity is the daemon's problem, so the answer past that is "busy", on which
// every client goes on without the daemon.
#pragma once

#include "stagehand/service/peer.hpp"

#include "stagehand/proto/messages.hpp"
#include "stagehand/util/fd.hpp"
#include "stagehand/util/result.hpp"

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace stagehand::service {

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

// What answers one request: called on the request's own worker thread with who sent it; it
// answers on `out` (progress frames, then one result or error). What it throws is answered as an
// internal error. Requests that do not parse never reach it: their client gets the parse error.
using Handler = std::function<void(const proto::Request& request, const Peer& peer, Responder& out)>;

// Why the daemon cannot serve `request` now, or nothing. Asked of a request that would wait for a
// turn (and again while it waits): its answer then comes at once instead of "busy" after
// queue_wait, so that its client goes on without the daemon without waiting (requests held where
// a disk stopped answering keep their turns until it answers). Called on the server's own thread:
// it must not block.
using Screen = std::function<std::optional<Error>(const proto::Request& request, const Peer& peer)>;

struct Conn; // a connection the server reads (server.cpp)

class Server
{
public:
  Server(Handler handler, UniqueFd listen_fd, ServerLimits limits = {}, Screen screen = {});
  // Waits for the requests still running (their workers use the server until they end).
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Serves until stop(), or a SIGTERM/SIGINT arriving on `signal_fd` (-1: none; SIGHUP calls
  // `on_reload`). Connections still waiting for their turn are closed; running requests go on.
  void run(int signal_fd = -1, const std::function<void()>& on_reload = {});
  // Ends run() (from any thread); a run() that starts later returns at once.
  void stop();
  std::size_t in_flight() const { return m_in_flight.load(); }

private:
  std::size_t in_flight_of(uid_t uid);
  // Whether a request of `uid` may start now (root always may).
  bool has_room(uid_t uid, bool root);
  // Runs `payload` on a worker thread that owns `conn` (answered busy when no thread can start).
  void start(Conn conn, std::string payload);
  Error busy(); // what a request that waited in vain is told
  // Whether the screen answered the request `payload` of connection `fd` (which is then dropped).
  bool screened_out(int fd, const Peer& peer, const std::string& payload);
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

  Handler m_handler;
  Screen m_screen;
  UniqueFd m_listen;
  ServerLimits m_limits;
  std::atomic<std::size_t> m_in_flight{0};
  // eventfd: a worker finished (queued requests may start), or stop() was called. Shared with the
  // workers, which signal it after their last use of the server.
  std::shared_ptr<UniqueFd> m_wake;
  std::atomic<bool> m_stop{false};
  std::mutex m_uid_mutex;
  std::map<uid_t, std::size_t> m_in_flight_by_uid;
};

} // namespace stagehand::service
