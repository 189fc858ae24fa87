// The one read of a cache miss, to the job and to the spool.
#include "stagehand/cache/spool.hpp"

#include "stagehand/fs/io.hpp"
#include "stagehand/util/fd.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace stagehand::cache {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t k_chunk = 1 << 20;

UniqueFd open_null() { return UniqueFd(::open("/dev/null", O_WRONLY | O_CLOEXEC)); }

// The spool's writer, a thread: drains the lane into the spool file once it is its turn (the job's
// copy done, the lane full, a fill following the spool), so that while the job's copy runs the spool
// costs it no copying (a copy beside it slows it: measured); what it could not write (or was told to discard) goes to /dev/null,
// so the read never waits on a writer that gave up.
class LaneWriter
{
public:
  LaneWriter(const SpoolLane& lane, int spool_fd) : m_lane(lane), m_spool(spool_fd)
  {
    m_thread = std::thread([this] { run(); });
  }
  LaneWriter(const LaneWriter&) = delete;
  LaneWriter& operator=(const LaneWriter&) = delete;
  ~LaneWriter() { (void)finish(); }

  void discard()
  {
    m_discard.store(true);
    m_cv.notify_one();
  }
  void read_over()
  {
    {
      std::lock_guard lock(m_mutex);
      m_read_over = true;
    }
    m_cv.notify_one();
  }
  // The lane is full, or the read can no longer wait on it: write from now on.
  void hurry()
  {
    if (!m_hurry.exchange(true)) {
      m_cv.notify_one();
    }
  }
  // Waits for the spool's end: "" when it holds every byte it was given, else why it does not.
  std::string finish()
  {
    if (m_thread.joinable()) {
      m_thread.join();
    }
    return m_failed;
  }

private:
  bool its_turn() const
  {
    if (m_hurry.load() || m_discard.load() || (m_lane.verdict && m_lane.verdict->followed.load() != 0)) {
      return true;
    }
    if (m_lane.go < 0) {
      return m_read_over;
    }
    pollfd p{m_lane.go, POLLIN, 0};
    return ::poll(&p, 1, 0) > 0;
  }

  void run()
  {
    {
      std::unique_lock lock(m_mutex);
      while (!its_turn()) {
        m_cv.wait_for(lock, std::chrono::milliseconds(5));
      }
    }
    UniqueFd null = open_null();
    for (;;) {
      const bool keep = !m_discard.load();
      const ssize_t n = ::splice(m_lane.rd, nullptr, keep ? m_spool : null.get(), nullptr, k_chunk, SPLICE_F_MOVE);
      if (n > 0 || (n < 0 && errno == EINTR)) {
        continue;
      }
      if (n == 0 || !keep) {
        break; // the lane's end (or nowhere left to put it: the read then finds the lane stalled)
      }
      m_failed = std::string("the spool could not be written: ") + ::strerror(errno);
      m_discard.store(true);
    }
    if (m_discard.load() && ::ftruncate(m_spool, 0) != 0) { /* best effort: removed with the fill anyway */ }
  }

  SpoolLane m_lane;
  int m_spool;
  std::atomic<bool> m_discard{false};
  std::atomic<bool> m_hurry{false};
  std::mutex m_mutex;
  std::condition_variable m_cv;
  bool m_read_over = false; // guarded by m_mutex
  std::string m_failed;     // the thread's until it is joined
  std::thread m_thread;
};

// Waits until the pipe `fd` can take more, at most until `until`: whether it can.
bool writable_by(int fd, Clock::time_point until)
{
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (left <= 0) {
      return false;
    }
    pollfd p{fd, POLLOUT, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left));
    if (r > 0) {
      return true;
    }
    if (r < 0 && errno != EINTR) {
      return false;
    }
  }
}

class Tee
{
public:
  Tee(int deliver_fd, int spool_fd, const SpoolPolicy& policy, archive::WorkCounters* counters, LaneWriter* writer)
    : m_deliver(deliver_fd), m_spool(spool_fd), m_policy(policy), m_counters(counters), m_writer(writer)
  {
    if (m_spool < 0) {
      m_result.spool_dropped = "no spool";
    }
  }

  bool delivering() const { return m_result.delivered; }
  bool spooling() const { return m_spool >= 0; }
  TeeResult& result() { return m_result; }

  void drop(const std::string& why)
  {
    if (m_spool >= 0) {
      if (m_writer) {
        m_writer->discard(); // it truncates the spool once it has emptied the lane
      } else if (::ftruncate(m_spool, 0) != 0) { /* best effort: removed with the fill anyway */ }
      // the disk gets its room back now, not when the daemon looks
      m_spool = -1;
      m_result.spool_dropped = why;
    }
  }

  void count(std::uint64_t n)
  {
    m_result.bytes += n;
    if (m_counters) {
      m_counters->bytes.fetch_add(n, std::memory_order_relaxed);
    }
  }

  // Moves `n` bytes out of the pipe `from` into the spool, or discards them.
  Status consume(int from, std::size_t n)
  {
    while (n > 0) {
      if (m_spool >= 0 && m_spooled + n > m_policy.max_bytes) {
        drop("larger than the node cache");
      }
      const int to = m_spool >= 0 ? m_spool : null_fd();
      const auto t0 = Clock::now();
      if (m_writer && to == m_spool) { // into the lane: page references, never a wait on the disk
        if (!into_lane(from, n, t0 + m_policy.max_stall)) {
          drop("the node cache's disk could not keep up");
        }
        continue;
      }
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
        if (Clock::now() - t0 > m_policy.max_stall) {
          drop("the node cache's disk could not keep up");
        }
      }
      n -= static_cast<std::size_t>(moved);
    }
    return ok_status();
  }

  // Moves `n` bytes that `from` holds into the lane; false when the lane stays full past `until`
  // (the bytes are left in `from`).
  bool into_lane(int from, std::size_t& n, Clock::time_point until)
  {
    while (n > 0) {
      const ssize_t moved = ::splice(from, nullptr, m_spool, nullptr, n, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (moved > 0) {
        m_spooled += static_cast<std::uint64_t>(moved);
        n -= static_cast<std::size_t>(moved);
        continue;
      }
      if (moved < 0 && errno == EINTR) {
        continue;
      }
      if (moved < 0 && errno == EAGAIN) { // `from` holds the bytes: the lane is full
        m_writer->hurry();
        if (writable_by(m_spool, until)) {
          continue;
        }
      }
      return false;
    }
    return true;
  }

  // Once, from the pipe `from` straight into the spool: how many bytes (0 at its end).
  Result<std::size_t> spool_from(int from, std::size_t n)
  {
    if (m_writer) {
      m_writer->hurry(); // nobody delivers: this blocks on the lane
    }
    for (;;) {
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
      } else if (Clock::now() - t0 > m_policy.max_stall) {
        drop("the node cache's disk could not keep up");
      }
      return static_cast<std::size_t>(moved);
    }
  }

  // The same for bytes in memory (the read/write path).
  void spool_bytes(const char* data, std::size_t n)
  {
    if (m_writer) {
      m_writer->hurry(); // write(2) blocks on a full lane: it is written as it comes
    }
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
    if (m_spool >= 0 && Clock::now() - t0 > m_policy.max_stall) {
      drop("the node cache's disk could not keep up");
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
  int null_fd()
  {
    if (!m_null.valid()) {
      m_null = open_null();
    }
    return m_null.get();
  }

  int m_deliver;
  int m_spool;
  SpoolPolicy m_policy;
  archive::WorkCounters* m_counters;
  LaneWriter* m_writer; // null: the spool is written here, as the bytes pass
  std::uint64_t m_spooled = 0;
  UniqueFd m_null;
  TeeResult m_result;
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
  std::vector<char> buf(k_chunk);
  for (;;) {
    // The verdict is read before the read that finds the end: a "complete" seen then means the
    // end found after it is the spool's end.
    const SpoolState before = state();
    const ssize_t n = ::read(spool.get(), buf.data(), buf.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return Error::from_errno("the spool");
    }
    if (n > 0) {
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

std::optional<LanePipe> make_lane(std::uint64_t source_bytes)
{
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    return std::nullopt;
  }
  LanePipe lane{UniqueFd(p[0]), UniqueFd(p[1]), 0};
  std::size_t want = 64 << 10;
  while (want < source_bytes && want < k_lane_max) {
    want *= 2;
  }
  for (; want > (64 << 10); want /= 2) {
    if (::fcntl(lane.wr.get(), F_SETPIPE_SZ, static_cast<int>(want)) >= 0) {
      break; // else past fs.pipe-max-size, or the user's pipes' limit: smaller
    }
  }
  const int got = ::fcntl(lane.wr.get(), F_GETPIPE_SZ);
  lane.bytes = got > 0 ? static_cast<std::size_t>(got) : 0;
  return lane;
}

Result<TeeResult> tee_source(int in_fd, int deliver_fd, int spool_fd, const SpoolPolicy& policy,
                             archive::WorkCounters* counters, SpoolLane lane, const ReadOver& read_over)
{
  UniqueFd lane_wr(lane.wr); // closed at the read's end: the writer's end of the lane then ends
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, nullptr);
  (void)::fcntl(deliver_fd, F_SETPIPE_SZ, static_cast<int>(k_chunk)); // fewer wake-ups; best effort
  struct stat st {};
  if (::fstat(in_fd, &st) != 0) {
    return Error::from_errno("cannot stat");
  }
  std::optional<LaneWriter> writer;
  if (lane.valid() && spool_fd >= 0) {
    writer.emplace(lane, spool_fd);
  }
  Tee t(deliver_fd, writer ? lane.wr : spool_fd, policy, counters, writer ? &*writer : nullptr);
  auto r = S_ISFIFO(st.st_mode) ? tee_from_pipe(in_fd, t) : tee_from_file(in_fd, t);
  lane_wr.reset();
  if (!writer) {
    if (r && read_over) {
      read_over(*r);
    }
    return r;
  }
  if (!r) {
    writer->discard();
    (void)writer->finish();
    return r;
  }
  if (read_over) { // said before the writer may take a core
    read_over(*r);
  }
  writer->read_over();
  if (std::string failed = writer->finish(); r->spool_dropped.empty() && !failed.empty()) {
    r->spool_dropped = std::move(failed);
  }
  return r;
}

} // namespace stagehand::cache
