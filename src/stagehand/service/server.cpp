// epoll loop over the listening socket, the signal fd, the wake-up and the connections still reading.
#include "stagehand/service/server.hpp"

#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/proto/frame.hpp"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <system_error>
#include <thread>
#include <variant>

namespace stagehand::service {

struct Conn
{
  UniqueFd fd;
  Peer peer;
  proto::FrameReader reader{proto::k_max_request_bytes};
  std::chrono::steady_clock::time_point deadline; // for the whole request; then, queued, for the wait
  std::optional<std::string> queued;              // a whole request waiting for room
  std::uint64_t order = 0;                        // arrival, for first come, first served
};

namespace {

using Clock = std::chrono::steady_clock;

// " (job N)" for a request about a job, else "".
std::string job_of(const proto::Request& r)
{
  return std::visit(
    [](const auto& op) {
      if constexpr (requires { op.job_id; }) {
        return " (job " + std::to_string(op.job_id) + ")";
      } else {
        return std::string();
      }
    },
    r);
}

// A request whose client gave up waiting for it before it started (the daemon was stopped, or
// stuck): that client stages, copies or cleans up without the daemon by now, and the daemon must
// not do the same work beside it. Logs it.
bool abandoned(int fd, uid_t uid, const std::string& payload)
{
  if (!client_gone(fd)) {
    return false;
  }
  auto request = proto::parse_request(payload);
  spdlog::info("a {} request of uid {}{} dropped: its client gave up waiting before it started",
               request ? proto::op_name(*request) : "malformed", uid, request ? job_of(*request) : "");
  return true;
}

// Best effort, never blocking: a final word to a client we are about to drop.
void refuse_now(int fd, const Error& e)
{
  const std::string frame = proto::encode_frame(proto::serialize_error(e));
  (void)!::send(fd, frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
}

// Reads one signal from `signal_fd`: SIGHUP calls `on_reload`; true for SIGTERM and SIGINT.
bool stop_signalled(int signal_fd, const std::function<void()>& on_reload)
{
  struct signalfd_siginfo si {};
  if (::read(signal_fd, &si, sizeof si) == sizeof si) {
    if (si.ssi_signo == SIGHUP) {
      if (on_reload) {
        on_reload();
      }
    } else {
      spdlog::info("SIG{}: stopping", ::sigabbrev_np(static_cast<int>(si.ssi_signo)));
      return true;
    }
  }
  return false;
}

} // namespace

Error Server::busy()
{
  return Error::limit("the daemon is busy (" + std::to_string(m_in_flight.load()) + " requests running, waited " +
                      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(m_limits.queue_wait).count()) +
                      " s for a turn)");
}

Result<UniqueFd> listen_socket(const std::string& path)
{
  struct sockaddr_un addr {};
  if (path.size() >= sizeof addr.sun_path || path.empty() || path.front() != '/') {
    return Error::config("[daemon] socket: \"" + path + "\" is not a usable socket path");
  }
  const auto slash = path.rfind('/');
  const std::string dir = slash == 0 ? "/" : path.substr(0, slash);
  const std::string name = path.substr(slash + 1);
  auto dir_fd = fs::open_trusted_dir(dir, fs::CreateMissing::yes);
  if (!dir_fd) {
    return dir_fd.error().with_context("[daemon] socket directory");
  }
  struct stat st {};
  if (::fstatat(dir_fd->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Error::config(path + " exists and is not a socket: refused");
    }
    ::unlinkat(dir_fd->get(), name.c_str(), 0); // stale: a daemon that died left it
  }
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd.valid()) {
    return Error::from_errno("socket");
  }
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const mode_t old = ::umask(0111); // 0666: every local user may connect; requests are checked
  int rc = ::bind(fd.get(), reinterpret_cast<struct sockaddr*>(&addr), sizeof addr);
  ::umask(old);
  if (rc != 0) {
    return Error::from_errno("cannot bind " + path);
  }
  if (::fchmodat(dir_fd->get(), name.c_str(), 0666, 0) != 0) {
    return Error::from_errno("cannot set the mode of " + path);
  }
  if (::listen(fd.get(), 256) != 0) {
    return Error::from_errno("cannot listen on " + path);
  }
  return fd;
}

std::size_t Server::in_flight_of(uid_t uid)
{
  std::lock_guard lock(m_uid_mutex);
  auto it = m_in_flight_by_uid.find(uid);
  return it == m_in_flight_by_uid.end() ? 0 : it->second;
}

ServerLimits limits_within(std::uint64_t open_files)
{
  constexpr std::uint64_t k_own = 64;          // the daemon's own: state, cache, logs, GC
  constexpr std::uint64_t k_per_request = 24;  // a staging request at its busiest
  const std::uint64_t budget = open_files > 2 * k_own ? open_files - k_own : k_own;
  ServerLimits limits;
  limits.max_in_flight = std::clamp<std::uint64_t>(budget / 2 / k_per_request, 2, limits.max_in_flight);
  limits.max_connections = std::clamp<std::uint64_t>(budget / 2, 8, limits.max_connections);
  limits.max_per_uid = std::min<std::size_t>(limits.max_per_uid, limits.max_connections / 2);
  return limits;
}

Server::Server(Handler handler, UniqueFd listen_fd, ServerLimits limits, Screen screen)
  : m_handler(std::move(handler)), m_screen(std::move(screen)), m_listen(std::move(listen_fd)), m_limits(limits),
    m_wake(std::make_shared<UniqueFd>(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)))
{
}

Server::~Server()
{
  while (m_in_flight.load() > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

void Server::stop()
{
  m_stop = true;
  const std::uint64_t one = 1;
  (void)!::write(m_wake->get(), &one, sizeof one);
}

bool Server::has_room(uid_t uid, bool root)
{
  return root || (m_in_flight.load() < m_limits.max_in_flight && in_flight_of(uid) < m_limits.max_in_flight_per_uid);
}

void Server::start(Conn conn, std::string payload)
{
  const uid_t uid = conn.peer.uid;
  ++m_in_flight;
  {
    std::lock_guard lock(m_uid_mutex);
    ++m_in_flight_by_uid[uid];
  }
  // The worker's last use of the server is its count; the wake descriptor it holds itself.
  auto finished = [this, uid, wake = m_wake] {
    {
      std::lock_guard lock(m_uid_mutex);
      if (--m_in_flight_by_uid[uid] == 0) {
        m_in_flight_by_uid.erase(uid);
      }
    }
    --m_in_flight;
    const std::uint64_t one = 1;
    (void)!::write(wake->get(), &one, sizeof one); // queued requests may start now
  };
  // Shared with the thread, so that the connection is still here to answer when no thread starts.
  auto held = std::make_shared<Conn>(std::move(conn));
  try {
    // own thread: the daemon's (a request's) (scripts/thread-starts.sh)
    std::thread([this, finished, held, payload = std::move(payload)]() mutable {
      Responder out(held->fd.get());
      try {
        auto request = proto::parse_request(payload);
        if (!request) {
          out.error(request.error());
        } else {
          m_handler(*request, held->peer, out);
        }
      } catch (const std::exception& e) {
        spdlog::error("internal error: {}", e.what());
        out.error(Error::internal(std::string("internal error: ") + e.what()));
      }
      held->fd.reset(); // the client sees the end before the slot is free again
      finished();
    }).detach();
  } catch (const std::system_error& e) {
    // No thread (the task limit of the daemon's cgroup, memory): this request is answered busy
    // and its client goes on without the daemon; the daemon goes on too.
    spdlog::warn("cannot start a worker thread: {}; a request of uid {} is answered busy", e.what(), uid);
    refuse_now(held->fd.get(), Error::limit("the daemon is busy (it cannot start more work now)"));
    finished();
  }
}

bool Server::screened_out(int fd, const Peer& peer, const std::string& payload)
{
  if (!m_screen) {
    return false;
  }
  auto request = proto::parse_request(payload);
  if (!request) {
    return false; // (its worker answers the parse error)
  }
  auto why = m_screen(*request, peer);
  if (!why) {
    return false;
  }
  spdlog::info("a {} request of uid {}{} is answered without waiting for its turn: {}",
               proto::op_name(*request), peer.uid, job_of(*request), why->message);
  refuse_now(fd, *why);
  return true;
}

// The run loop's state: its epoll set and the connections still reading their request.
struct Server::Loop
{
  UniqueFd ep{::epoll_create1(EPOLL_CLOEXEC)};
  std::map<int, Conn> conns;
  std::uint64_t arrivals = 0;
  std::map<uid_t, std::size_t> per_uid;

  void watch(int fd)
  {
    struct epoll_event ev {};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    ::epoll_ctl(ep.get(), EPOLL_CTL_ADD, fd, &ev);
  }

  // Forgets a connection (closing it); the one after it.
  std::map<int, Conn>::iterator drop(std::map<int, Conn>::iterator it)
  {
    ::epoll_ctl(ep.get(), EPOLL_CTL_DEL, it->first, nullptr);
    if (--per_uid[it->second.peer.uid] == 0) {
      per_uid.erase(it->second.peer.uid);
    }
    return conns.erase(it);
  }

  // Forgets a connection whose request starts now: the connection, for its worker.
  Conn take(std::map<int, Conn>::iterator it)
  {
    Conn conn = std::move(it->second);
    drop(it);
    return conn;
  }
};

void Server::run(int signal_fd, const std::function<void()>& on_reload)
{
  Loop loop;
  loop.watch(m_listen.get());
  if (signal_fd >= 0) {
    loop.watch(signal_fd);
  }
  loop.watch(m_wake->get());
  auto looked_at_waiting = Clock::now();
  while (!m_stop) {
    struct epoll_event events[64];
    int n = ::epoll_wait(loop.ep.get(), events, 64, 250);
    if (n < 0 && errno != EINTR) {
      spdlog::error("epoll: {}", std::strerror(errno));
      return;
    }
    bool woken = false;
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == m_wake->get()) {
        std::uint64_t count = 0;
        (void)!::read(fd, &count, sizeof count);
        woken = true;
      } else if (fd == signal_fd) {
        if (stop_signalled(signal_fd, on_reload)) {
          return;
        }
      } else if (fd == m_listen.get()) {
        accept_all(loop);
      } else {
        read_request(loop, fd);
      }
    }
    // Every 250 ms at the latest, however busy the socket is: a waiting request the screen now
    // refuses is answered then, not after queue_wait.
    if (woken || n == 0 || Clock::now() - looked_at_waiting >= std::chrono::milliseconds(250)) {
      start_waiting(loop);
      looked_at_waiting = Clock::now();
    }
    drop_late(loop);
  }
}

void Server::accept_all(Loop& loop)
{
  for (;;) {
    UniqueFd c(::accept4(m_listen.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!c.valid()) {
      break;
    }
    Peer peer = peer_of(c.get());
    if (loop.conns.size() >= m_limits.max_connections ||
        (!peer.root() && loop.per_uid[peer.uid] >= m_limits.max_per_uid)) {
      refuse_now(c.get(), Error::limit("too many connections; try again later"));
      continue;
    }
    ++loop.per_uid[peer.uid];
    const int cfd = c.get();
    loop.watch(cfd);
    loop.conns.emplace(cfd, Conn{std::move(c), std::move(peer), proto::FrameReader(proto::k_max_request_bytes),
                                 Clock::now() + m_limits.request_deadline, std::nullopt, 0});
  }
}

void Server::read_request(Loop& loop, int fd)
{
  auto it = loop.conns.find(fd);
  if (it == loop.conns.end()) {
    return;
  }
  char buf[16384];
  ssize_t got = ::recv(fd, buf, sizeof buf, 0);
  if (got < 0 && (errno == EAGAIN || errno == EINTR)) {
    return;
  }
  if (got <= 0 || it->second.queued) {
    loop.drop(it); // closed before a whole request, or while it waited; or bytes after its request
    return;
  }
  if (auto st = it->second.reader.feed(buf, static_cast<std::size_t>(got)); !st) {
    refuse_now(fd, st.error());
    loop.drop(it);
    return;
  }
  auto payload = it->second.reader.next();
  if (!payload) {
    return;
  }
  if (abandoned(fd, it->second.peer.uid, *payload)) {
    loop.drop(it);
    return;
  }
  // Root (the prolog and epilog, an admin) never waits; a user's request starts when there is
  // room, else it waits its turn (start_waiting).
  if (!has_room(it->second.peer.uid, it->second.peer.root())) {
    if (screened_out(fd, it->second.peer, *payload)) {
      loop.drop(it);
      return;
    }
    spdlog::info("a request of uid {} waits for a turn ({} running, {} of them its own)", it->second.peer.uid,
                 m_in_flight.load(), in_flight_of(it->second.peer.uid));
    it->second.queued = std::move(*payload);
    it->second.order = ++loop.arrivals;
    it->second.deadline = Clock::now() + m_limits.queue_wait;
    return;
  }
  start(loop.take(it), std::move(*payload));
}

void Server::start_waiting(Loop& loop)
{
  std::vector<std::map<int, Conn>::iterator> waiting;
  for (auto it = loop.conns.begin(); it != loop.conns.end(); ++it) {
    if (it->second.queued) {
      waiting.push_back(it);
    }
  }
  std::sort(waiting.begin(), waiting.end(), [](auto a, auto b) { return a->second.order < b->second.order; });
  for (auto it : waiting) {
    if (abandoned(it->first, it->second.peer.uid, *it->second.queued) ||
        screened_out(it->first, it->second.peer, *it->second.queued)) {
      loop.drop(it);
    } else if (has_room(it->second.peer.uid, false)) {
      std::string payload = std::move(*it->second.queued);
      start(loop.take(it), std::move(payload));
    }
  }
}

void Server::drop_late(Loop& loop)
{
  const auto now = Clock::now();
  for (auto it = loop.conns.begin(); it != loop.conns.end();) {
    if (it->second.deadline <= now) {
      if (it->second.queued) {
        spdlog::info("a request of uid {} found no turn within {} ms: answered busy (its client stages without the "
                     "cache)",
                     it->second.peer.uid, m_limits.queue_wait.count());
      }
      refuse_now(it->first, it->second.queued ? busy() : Error::limit("no complete request within the deadline"));
      it = loop.drop(it);
    } else {
      ++it;
    }
  }
}

} // namespace stagehand::service
