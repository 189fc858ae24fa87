// The one read of a cache miss, to the job and to the spool.
#include "stagehand/cache/spool.hpp"

#include "stagehand/fs/io.hpp"
#include "stagehand/util/fd.hpp"
#include "stagehand/util/thread.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

namespace stagehand::cache {

namespace {

constexpr const char* k_not_kept_up = "the node cache's disk could not keep up";

using Clock = std::chrono::steady_clock;
constexpr std::size_t k_chunk = 1 << 20;

// What the spool's writer thread and the read share (the thread may outlive the read's Tee).
struct LaneState
{
  std::atomic<int> error{0};     // the writer's errno: the spool could not be written
  std::atomic<bool> stop{false}; // dropped: the writer discards the rest and empties the spool
  std::atomic<bool> stalled{false}; // one write blocked longer than the policy's patience.grace
  std::atomic<std::int64_t> writing_since{0}; // the write under way: when it began (0: none)
  std::atomic<bool> done{false};

  // Whether a write stalled, or the one under way has run past `grace` (a disk that never
  // answers never returns from it).
  bool stalled_by(std::chrono::milliseconds grace) const
  {
    const std::int64_t since = writing_since.load();
    return stalled.load() ||
           (since != 0 && Clock::now().time_since_epoch() - Clock::duration(since) > grace);
  }
};

// The spool's writer: moves what arrives in the lane (a pipe) into the spool file until the
// lane's end, so that a write the disk holds back holds back this thread, not the job's bytes.
// Owns its ends (a copy of the spool's descriptor): closing the read's never pulls a descriptor
// from under it.
void write_lane(UniqueFd lane, UniqueFd spool, std::chrono::milliseconds grace,
                const std::shared_ptr<LaneState>& state)
{
  UniqueFd null(::open("/dev/null", O_WRONLY | O_CLOEXEC));
  for (;;) {
    // Bytes to write first: only the write is timed, not the wait for the read's next bytes (a
    // slow shared filesystem is not the cache's disk failing to keep up).
    struct pollfd ready {lane.get(), POLLIN, 0};
    if (::poll(&ready, 1, -1) < 0 && errno == EINTR) {
      continue;
    }
    const bool discard = state->stop.load() || state->error.load() != 0;
    const int to = discard ? null.get() : spool.get();
    const auto t0 = Clock::now();
    state->writing_since = discard ? 0 : t0.time_since_epoch().count();
    const ssize_t n = ::splice(lane.get(), nullptr, to, nullptr, k_chunk, SPLICE_F_MOVE);
    state->writing_since = 0;
    if (n > 0 && !discard && Clock::now() - t0 > grace) {
      state->stalled = true;
    }
    if (n == 0) {
      break;
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && discard) {
      break;
    }
    if (n < 0) {
      state->error = errno;
    }
  }
  if (state->stop.load() || state->error.load() != 0) {
    if (::ftruncate(spool.get(), 0) != 0) { /* best effort: removed with the fill anyway */ }
  }
  state->done = true;
}

class Tee
{
public:
  Tee(int deliver_fd, int spool_fd, const SpoolPolicy& policy, archive::WorkCounters* counters)
    : m_deliver(deliver_fd), m_spool(spool_fd), m_policy(policy), m_counters(counters)
  {
    if (m_spool < 0) {
      m_result.spool_dropped = "no spool";
    }
  }
  Tee(const Tee&) = delete;
  Tee& operator=(const Tee&) = delete;
  ~Tee()
  {
    if (m_writer.joinable()) { // a read that failed: the writer drops what it has and goes
      m_lane_state->stop = true;
      m_lane.reset();
      m_writer.detach();
    }
  }

  bool delivering() const { return m_result.delivered; }
  bool spooling() const { return m_spool >= 0; }
  TeeResult& result() { return m_result; }

  void drop(const std::string& why)
  {
    if (m_spool >= 0) {
      if (m_writer.joinable()) { // the writer empties the spool once it has seen the lane's end
        m_lane_state->stop = true;
        m_lane.reset();
      } else if (::ftruncate(m_spool, 0) != 0) { /* best effort: removed with the fill anyway */ }
      // the disk gets its room back now, not when the daemon looks
      m_spool = -1;
      m_result.spool_dropped = why;
    }
  }

  // The source's end: the job's delivery sees its end at once; the spool's writer has what is
  // left of the patience to write its last bytes, or the spool is dropped.
  void finish()
  {
    if (!m_writer.joinable()) {
      return;
    }
    fs::end_writes(m_deliver); // the job's delivery sees the source's end now
    (void)settle_in_time();
  }

  void count(std::uint64_t n)
  {
    m_result.bytes += n;
    if (m_counters) {
      m_counters->bytes.fetch_add(n, std::memory_order_relaxed);
    }
  }

  // Moves `n` bytes out of the pipe `from` into the spool's lane, or discards them. A full lane
  // (the writer held back by the disk) is waited for, while a delivery runs, within the patience;
  // then the spool is dropped. Without a lane (no thread, or a pipe smaller than a chunk), as
  // consume_directly.
  Status consume(int from, std::size_t n)
  {
    if (m_spool >= 0 && !m_lane_tried) {
      m_lane_tried = true;
      (void)start_lane();
    }
    if (m_spool >= 0 && !m_lane.valid()) {
      return consume_directly(from, n);
    }
    while (n > 0) {
      if (m_spool >= 0 && m_spooled + n > m_policy.max_bytes) {
        drop("larger than the node cache");
      }
      if (const int e = m_spool >= 0 ? m_lane_state->error.load() : 0; e != 0) {
        drop(std::string("the spool could not be written: ") + ::strerror(e));
      }
      if (m_spool >= 0 && m_lane_state->stalled_by(m_policy.patience.grace)) {
        drop(k_not_kept_up);
      }
      const bool spool = m_spool >= 0;
      const ssize_t moved = ::splice(from, nullptr, spool ? m_lane.get() : null_fd(), nullptr, n,
                                     SPLICE_F_MOVE | (spool ? SPLICE_F_NONBLOCK : 0U));
      if (moved > 0) {
        m_spooled += spool ? static_cast<std::uint64_t>(moved) : 0;
        n -= static_cast<std::size_t>(moved);
        continue;
      }
      if (moved < 0 && errno == EINTR) {
        continue;
      }
      if (spool && moved < 0 && errno == EAGAIN) {
        if (!wait_for_lane()) {
          drop(k_not_kept_up);
        }
        continue;
      }
      if (spool) {
        drop(moved < 0 ? std::string("the spool could not be written: ") + ::strerror(errno) : "short spool write");
        continue; // discard the rest of these bytes
      }
      return Error::from_errno("cannot discard");
    }
    return ok_status();
  }

  // Moves `n` bytes out of the pipe `from` into the spool itself, or discards them; one write
  // blocking longer than patience.grace drops the spool.
  Status consume_directly(int from, std::size_t n)
  {
    while (n > 0) {
      if (m_spool >= 0 && m_spooled + n > m_policy.max_bytes) {
        drop("larger than the node cache");
      }
      const int to = m_spool >= 0 ? m_spool : null_fd();
      const auto t0 = Clock::now();
      const ssize_t moved = ::splice(from, nullptr, to, nullptr, n, SPLICE_F_MOVE);
      if (moved <= 0) {
        if (moved < 0 && errno == EINTR) {
          continue;
        }
        if (m_spool >= 0) {
          drop(moved < 0 ? std::string("the spool could not be written: ") + ::strerror(errno) : "short spool write");
          continue; // discard the rest of these bytes
        }
        return Error::from_errno("cannot discard");
      }
      if (m_spool >= 0) {
        m_spooled += static_cast<std::uint64_t>(moved);
        drop_if_slow(t0);
      }
      n -= static_cast<std::size_t>(moved);
    }
    return ok_status();
  }

  // Once, from the pipe `from` straight into the spool: how many bytes (0 at its end). Only the
  // write is timed, not the wait for the writer's next bytes (a directory's reader copies the job's
  // files between them).
  Result<std::size_t> spool_from(int from, std::size_t n)
  {
    if (m_writer.joinable() && !settle_in_time()) { // the lane's bytes first: these follow them
      return std::size_t{0};                          // dropped: nobody wants the rest
    }
    for (;;) {
      struct pollfd ready {from, POLLIN, 0};
      if (::poll(&ready, 1, -1) < 0 && errno == EINTR) {
        continue;
      }
      const auto t0 = Clock::now();
      const ssize_t moved = ::splice(from, nullptr, m_spool, nullptr, n, SPLICE_F_MOVE);
      if (moved < 0 && errno == EINTR) {
        continue;
      }
      if (moved < 0) {
        drop(std::string("the spool could not be written: ") + ::strerror(errno));
        return std::size_t{0};
      }
      count(static_cast<std::uint64_t>(moved));
      m_spooled += static_cast<std::uint64_t>(moved);
      if (m_spooled > m_policy.max_bytes) {
        drop("larger than the node cache");
      } else {
        drop_if_slow(t0);
      }
      return static_cast<std::size_t>(moved);
    }
  }

  // The same for bytes in memory (the read/write path).
  void spool_bytes(const char* data, std::size_t n)
  {
    if (m_spool >= 0 && m_spooled + n > m_policy.max_bytes) {
      drop("larger than the node cache");
    }
    const auto t0 = Clock::now();
    while (m_spool >= 0 && n > 0) {
      const ssize_t w = ::write(m_spool, data, n);
      if (w < 0 && errno == EINTR) {
        continue;
      }
      if (w <= 0) {
        drop(std::string("the spool could not be written: ") + ::strerror(errno));
        return;
      }
      m_spooled += static_cast<std::uint64_t>(w);
      data += w;
      n -= static_cast<std::size_t>(w);
    }
    if (m_spool >= 0) {
      drop_if_slow(t0);
    }
  }

  // One write of the spool's, begun at `t0`, that took longer than the patience's grace: the disk
  // cannot keep up, and the spool is dropped.
  void drop_if_slow(Clock::time_point t0)
  {
    if (Clock::now() - t0 > m_policy.patience.grace) {
      drop(k_not_kept_up);
    }
  }

  // Writes to the delivery; a closed pipe ends the delivery, not the read.
  void deliver_bytes(const char* data, std::size_t n)
  {
    while (m_result.delivered && n > 0) {
      const ssize_t w = ::write(m_deliver, data, n);
      if (w < 0 && errno == EINTR) {
        continue;
      }
      if (w <= 0) {
        m_result.delivered = false;
        return;
      }
      data += w;
      n -= static_cast<std::size_t>(w);
    }
  }

  // Duplicates up to `n` bytes at the head of the pipe `from` into the delivery: how many (0 at
  // the end of a pipe with no writer left), or -1 when the delivery is gone.
  ssize_t tee_to_delivery(int from, std::size_t n)
  {
    for (;;) {
      const ssize_t t = ::tee(from, m_deliver, n, 0);
      if (t < 0 && errno == EINTR) {
        continue;
      }
      if (t < 0) {
        m_result.delivered = false;
        return -1;
      }
      return t;
    }
  }

private:
  // The spool's writer thread and its lane (a pipe as large as a chunk, written without blocking).
  bool start_lane()
  {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) {
      return false;
    }
    UniqueFd rd(p[0]);
    UniqueFd wr(p[1]);
    UniqueFd spool(::fcntl(m_spool, F_DUPFD_CLOEXEC, 0));
    if (!spool.valid()) {
      return false;
    }
    // A lane smaller than a chunk (the user's pipe pages used up: pipe-user-pages-soft) would
    // keep the read waiting on every chunk: the spool is then written directly.
    (void)::fcntl(wr.get(), F_SETPIPE_SZ, static_cast<int>(k_chunk));
    if (::fcntl(wr.get(), F_GETPIPE_SZ) < static_cast<int>(k_chunk)) {
      return false;
    }
    m_lane_state = std::make_shared<LaneState>();
    try {
      // (Its own stack: this runs in a child forked from the daemon's threads; util/thread.hpp.)
      m_writer = Thread([rd = std::move(rd), spool = std::move(spool), grace = m_policy.patience.grace,
                         state = m_lane_state]() mutable {
        write_lane(std::move(rd), std::move(spool), grace, state);
      });
    } catch (const std::system_error&) {
      return false;
    }
    m_lane = std::move(wr);
    return true;
  }

  // The lane written out and its writer gone: within what is left of the patience while a
  // delivery runs (the job's answer waits for this read's end), else as long as no write stalls;
  // past that the spool is dropped and the writer, blocked in the disk's write, left to end with
  // this process. Whether the spool is still whole.
  bool settle_in_time()
  {
    m_lane.reset();
    const bool delivered = delivering();
    while (!m_lane_state->done.load() && (delivered ? patience_left() > Clock::duration::zero()
                                                    : !m_lane_state->stalled_by(m_policy.patience.grace))) {
      const auto t0 = Clock::now();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      m_waited += Clock::now() - t0;
    }
    if (!m_lane_state->done.load()) {
      drop(k_not_kept_up);
      m_writer.detach();
      return false;
    }
    m_writer.join();
    if (const int e = m_lane_state->error.load(); e != 0 && m_spool >= 0) {
      m_spool = -1; // the writer emptied it
      m_result.spool_dropped = std::string("the spool could not be written: ") + ::strerror(e);
    } else if (m_lane_state->stalled.load() && m_spool >= 0) {
      drop(k_not_kept_up);
    }
    return m_spool >= 0;
  }

  // What is left of the read's patience with the spool.
  Clock::duration patience_left() const { return m_policy.patience.left(Clock::now() - m_started, m_waited); }

  // Waits for room in the lane: while a delivery runs, at most what is left of the patience
  // (false when none is left); without one (nobody waits for these bytes but the cache), as long
  // as no single write of the spool's stalls (the writer says so).
  bool wait_for_lane()
  {
    if (!delivering()) {
      struct pollfd room {m_lane.get(), POLLOUT, 0};
      (void)::poll(&room, 1, 50);
      return !m_lane_state->stalled_by(m_policy.patience.grace);
    }
    const auto left = patience_left();
    if (left <= Clock::duration::zero()) {
      return false;
    }
    struct pollfd room {m_lane.get(), POLLOUT, 0};
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    const auto t0 = Clock::now();
    (void)::poll(&room, 1, static_cast<int>(std::min<long long>(ms, 1 << 30)));
    m_waited += Clock::now() - t0;
    return true; // the next splice says whether it made room
  }

  int null_fd()
  {
    if (!m_null.valid()) {
      m_null = UniqueFd(::open("/dev/null", O_WRONLY | O_CLOEXEC));
    }
    return m_null.get();
  }

  int m_deliver;
  int m_spool;
  SpoolPolicy m_policy;
  archive::WorkCounters* m_counters;
  std::uint64_t m_spooled = 0;
  UniqueFd m_null;
  TeeResult m_result;
  Clock::time_point m_started = Clock::now();
  Clock::duration m_waited{};     // in wait_for_lane and finish, all together
  bool m_lane_tried = false;
  UniqueFd m_lane;                // the lane's write end; closed: the writer ends
  std::shared_ptr<LaneState> m_lane_state;
  Thread m_writer;
};

Result<TeeResult> copy_loop(int in_fd, Tee& t)
{
  std::vector<char> buf(k_chunk);
  for (;;) {
    const ssize_t n = ::read(in_fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return Error::from_errno("cannot read");
    }
    if (n == 0) {
      return t.result();
    }
    t.count(static_cast<std::uint64_t>(n));
    t.deliver_bytes(buf.data(), static_cast<std::size_t>(n));
    t.spool_bytes(buf.data(), static_cast<std::size_t>(n));
    if (!t.delivering() && !t.spooling()) {
      return t.result();
    }
  }
}

// A pipe as the source: what is teed to the delivery end is then moved to the spool; once nobody
// delivers, the rest goes to the spool alone.
Result<TeeResult> tee_from_pipe(int in_fd, Tee& t)
{
  for (;;) {
    if (t.delivering()) {
      const ssize_t n = t.tee_to_delivery(in_fd, k_chunk);
      if (n == 0) {
        return t.result(); // the writer closed the pipe: the end
      }
      if (n > 0) {
        t.count(static_cast<std::uint64_t>(n));
        if (auto moved = t.consume(in_fd, static_cast<std::size_t>(n)); !moved) {
          return moved.error();
        }
        continue;
      }
    }
    if (!t.spooling()) {
      return t.result(); // nobody wants the rest
    }
    auto n = t.spool_from(in_fd, k_chunk);
    if (!n) {
      return n.error();
    }
    if (*n == 0) {
      return t.result();
    }
  }
}

// A file as the source: moved into a private pipe first (page references, not copies), then as
// from a pipe.
Result<TeeResult> tee_from_file(int in_fd, Tee& t)
{
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    return Error::from_errno("pipe");
  }
  UniqueFd rd(p[0]);
  UniqueFd wr(p[1]);
  (void)::fcntl(wr.get(), F_SETPIPE_SZ, static_cast<int>(k_chunk));
  for (;;) {
    if (!t.delivering() && !t.spooling()) {
      return t.result();
    }
    const ssize_t got = ::splice(in_fd, nullptr, wr.get(), nullptr, k_chunk, SPLICE_F_MOVE);
    if (got < 0 && errno == EINTR) {
      continue;
    }
    if (got < 0 && (errno == EINVAL || errno == ENOSYS) && t.result().bytes == 0) {
      return copy_loop(in_fd, t); // a filesystem without splice
    }
    if (got < 0) {
      return Error::from_errno("cannot read");
    }
    if (got == 0) {
      return t.result();
    }
    t.count(static_cast<std::uint64_t>(got));
    std::size_t left = static_cast<std::size_t>(got);
    while (left > 0) {
      std::size_t n = left;
      if (t.delivering()) {
        const ssize_t teed = t.tee_to_delivery(rd.get(), left);
        if (teed > 0) {
          n = static_cast<std::size_t>(teed);
        }
      }
      if (auto moved = t.consume(rd.get(), n); !moved) {
        return moved.error();
      }
      left -= n;
    }
  }
}

} // namespace

Status follow_spool(int dir_fd, int out_fd, const SpoolVerdict& verdict)
{
  constexpr auto k_poll = std::chrono::milliseconds(2);
  auto state = [&] { return static_cast<SpoolState>(verdict.state.load(std::memory_order_acquire)); };
  UniqueFd spool;
  while (!spool.valid()) { // the tee makes it
    spool = UniqueFd(::openat(dir_fd, k_spool_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
    if (spool.valid()) {
      break;
    }
    if (errno != ENOENT || state() != SpoolState::writing) {
      return Error::io("the spool was not made", errno == ENOENT ? EIO : errno);
    }
    std::this_thread::sleep_for(k_poll);
  }
  // The spool's pages moved into the fill's pipe (no copy through this process), or read and
  // written where the filesystem (or the fill's end) cannot splice.
  enum class Way { splice, copy } way = Way::splice;
  std::vector<char> buf;
  for (;;) {
    // The verdict is read before the read that finds the end: a "complete" seen then means the
    // end found after it is the spool's end.
    const SpoolState before = state();
    const ssize_t n = way == Way::splice ? ::splice(spool.get(), nullptr, out_fd, nullptr, k_chunk, SPLICE_F_MOVE)
                                         : ::read(spool.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && way == Way::splice && (errno == EINVAL || errno == ENOSYS)) {
      way = Way::copy;
      buf.resize(k_chunk);
      continue;
    }
    if (n < 0) {
      return Error::from_errno(way == Way::splice && errno == EPIPE ? "the fill" : "the spool");
    }
    if (n > 0) {
      if (way == Way::splice) {
        continue;
      }
      if (auto st = fs::write_all(out_fd, std::string_view(buf.data(), static_cast<std::size_t>(n)), "the fill"); !st) {
        return st;
      }
      continue;
    }
    switch (before) {
    case SpoolState::complete:
      return ok_status();
    case SpoolState::dropped:
      return Error::io("the spool was given up", EIO);
    case SpoolState::writing:
      std::this_thread::sleep_for(k_poll);
      break;
    }
  }
}

Result<TeeResult> tee_source(int in_fd, int deliver_fd, int spool_fd, const SpoolPolicy& policy,
                             archive::WorkCounters* counters)
{
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, nullptr);
  (void)::fcntl(deliver_fd, F_SETPIPE_SZ, static_cast<int>(k_chunk)); // fewer wake-ups; best effort
  Tee t(deliver_fd, spool_fd, policy, counters);
  struct stat st {};
  if (::fstat(in_fd, &st) != 0) {
    return Error::from_errno("cannot stat");
  }
  auto teed = S_ISFIFO(st.st_mode) ? tee_from_pipe(in_fd, t) : tee_from_file(in_fd, t);
  if (!teed) { // the delivery left open: the failure is said before its stream ends
    t.drop("the read failed");
    return teed.error();
  }
  t.finish();
  return t.result();
}

} // namespace stagehand::cache
