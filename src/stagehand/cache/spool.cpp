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
#include <cstring>
#include <thread>
#include <vector>

namespace stagehand::cache {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t k_chunk = 1 << 20;

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

  bool delivering() const { return m_result.delivered; }
  bool spooling() const { return m_spool >= 0; }
  TeeResult& result() { return m_result; }

  void drop(const std::string& why)
  {
    if (m_spool >= 0) {
      if (::ftruncate(m_spool, 0) != 0) { /* best effort: removed with the fill anyway */ }
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

  // Once, from the pipe `from` straight into the spool: how many bytes (0 at its end). Only the
  // write is timed, not the wait for the writer's next bytes (a directory's reader copies the job's
  // files between them).
  Result<std::size_t> spool_from(int from, std::size_t n)
  {
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
      } else if (Clock::now() - t0 > m_policy.max_stall) {
        drop("the node cache's disk could not keep up");
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
  if (S_ISFIFO(st.st_mode)) {
    return tee_from_pipe(in_fd, t);
  }
  return tee_from_file(in_fd, t);
}

} // namespace stagehand::cache
