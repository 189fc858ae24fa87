// A directory's one read: the job's copy and the cache's tar stream from the same bytes.
#include "stagehand/cache/tree_read.hpp"

#include "stagehand/archive/tar_stream.hpp"
#include "stagehand/cache/key.hpp"
#include "stagehand/fs/io.hpp"
#include "stagehand/fs/tree_copy.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/util/fd.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace stagehand::cache {

namespace {

using archive::TarType;

// Files from this size on are moved through a pipe (splice, tee): below it a read into the
// stream's buffer and a write of the copy cost less than the pipe's round trips.
constexpr std::uint64_t k_splice_from = 256U << 10;
constexpr std::size_t k_chunk = 1U << 20;
using Clock = std::chrono::steady_clock;
constexpr const char* k_not_kept_up = "the node cache's disk could not keep up with the job's copy";

bool same_file(const struct stat& a, const struct stat& b)
{
  return a.st_ino == b.st_ino && a.st_dev == b.st_dev && a.st_size == b.st_size &&
         a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec &&
         a.st_ctim.tv_sec == b.st_ctim.tv_sec && a.st_ctim.tv_nsec == b.st_ctim.tv_nsec;
}

class TreeReader
{
public:
  TreeReader(int out_fd, bool copying, std::uint64_t max_bytes, const std::string& canonical, const std::string& shown,
             const TreeReadOptions& options)
    : m_stream(out_fd), m_copying(copying), m_max(max_bytes), m_shown(shown),
      m_key(canonical, stage::SourceKind::dir, stage::Unpack::never), m_patience(options.patience)
  {
    m_out.copied.counters = options.progress;
    if (copying) { // the copy never waits on the stream for longer than its patience
      (void)::fcntl(out_fd, F_SETFL, ::fcntl(out_fd, F_GETFL) | O_NONBLOCK);
      m_stream.set_patience([this] { return patience_ms(); }, k_not_kept_up);
    }
  }

  Result<fs::Placed> entry(const fs::WalkEntry& e, int dest_parent);
  Status end();
  TreeRead result();
  void add_root(const struct stat& root) { m_key.add("", root); }

private:
  Status symlink(const fs::WalkEntry& e, int dest_parent);
  Status file(const fs::WalkEntry& e, int in, const struct stat& now, int dest_parent);
  Result<std::uint64_t> small_data(int in, int out, std::uint64_t size, std::uint64_t already);
  Result<std::uint64_t> piped_data(int in, int out, std::uint64_t size);
  Status move_to_copy(int out, std::size_t n);
  Result<std::uint64_t> copy_rest(int in, int out, std::uint64_t room);
  void copied(std::uint64_t n)
  {
    if (m_out.copied.counters) {
      m_out.copied.counters->bytes.fetch_add(n, std::memory_order_relaxed);
    }
  }
  Error over_limit(const std::string& rel) const
  {
    const std::uint64_t room = m_max > m_out.copied.bytes ? m_max - m_out.copied.bytes : 0;
    return Error::limit(rel + ": more than " + std::to_string(room) + " bytes (limit)");
  }
  Status streamed(Status st);
  void keep_up();
  int patience_ms() const;
  void stop_stream(std::string why);
  static Error below(const std::string& rel, int err) { return Error::refused(rel + ": " + std::strerror(err), err); }

  archive::TarStreamWriter m_stream;
  bool m_copying;
  bool m_streaming = true;
  std::uint64_t m_max;
  const std::string& m_shown;
  KeyBuilder m_key;
  TreeRead m_out;
  UniqueFd m_pipe_rd, m_pipe_wr; // a large file's data on its way: teed to the stream, moved to the copy
  std::vector<char> m_buf;       // the copy's own buffer once the stream is gone
  Clock::time_point m_started = Clock::now();
  Patience m_patience;
};

// How much longer the copy may wait for the stream now (0: no longer).
int TreeReader::patience_ms() const
{
  const auto left = m_patience.left(Clock::now() - m_started, m_stream.waited());
  if (left <= Clock::duration::zero()) {
    return 0;
  }
  return static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(left).count());
}

// Past its patience the stream stops, and the copy goes on alone.
void TreeReader::keep_up()
{
  if (m_streaming && m_copying && patience_ms() == 0) {
    stop_stream(k_not_kept_up);
  }
}

// The stream ends here for good: its write end becomes /dev/null, so that the cache's side sees
// the end at once instead of waiting for the rest of the copy.
void TreeReader::stop_stream(std::string why)
{
  m_streaming = false;
  m_out.stream_dropped = std::move(why);
  fs::end_writes(m_stream.fd());
}

// A failure of the stream: with a copy to make, the stream stops and the copy goes on.
Status TreeReader::streamed(Status st)
{
  if (st || !m_copying) {
    return st;
  }
  stop_stream(st.error().code == ETIMEDOUT ? st.error().message
                                          : "the stream to the cache stopped: " + st.error().message);
  return ok_status();
}

Result<fs::Placed> TreeReader::entry(const fs::WalkEntry& e, int dest_parent)
{
  if (S_ISLNK(e.st.st_mode)) {
    if (auto st = symlink(e, dest_parent); !st) {
      return st.error();
    }
    return fs::Placed::other;
  }
  if (!S_ISDIR(e.st.st_mode) && !S_ISREG(e.st.st_mode)) {
    m_key.add(e.rel, e.st); // devices, FIFOs, sockets are not staged
    ++m_out.copied.skipped_special;
    return fs::Placed::other;
  }
  struct stat now {};
  auto in = open_walked(e, m_shown, now);
  if (!in) {
    return in.error();
  }
  m_key.add(e.rel, now);
  m_out.streamed.changed = m_out.streamed.changed || !same_file(now, e.st);
  if (S_ISREG(now.st_mode)) {
    if (auto st = file(e, in->get(), now, dest_parent); !st) {
      return st.error();
    }
    return fs::Placed::other;
  }
  if (m_streaming) {
    if (auto st = streamed(m_stream.header(TarType::directory, e.rel, now, 0)); !st) {
      return st.error();
    }
  }
  if (!m_copying) {
    return fs::Placed::other;
  }
  if (::mkdirat(dest_parent, e.name.c_str(), 0700) != 0) {
    return Error::from_errno("cannot create " + e.rel);
  }
  ++m_out.copied.dirs;
  return fs::Placed::directory;
}

// Read through an O_PATH open of the very link the walk listed: another one renamed there
// meanwhile is seen, never stored under this one's key.
Status TreeReader::symlink(const fs::WalkEntry& e, int dest_parent)
{
  UniqueFd link(::openat(e.parent_fd, e.name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  struct stat now {};
  if (!link.valid() || ::fstat(link.get(), &now) != 0 || !S_ISLNK(now.st_mode)) {
    return Error::refused(e.rel + ": changed while staging", ESTALE);
  }
  m_out.streamed.changed = m_out.streamed.changed || !same_file(now, e.st);
  // st_size is the target's length where the filesystem says it (0 on some): room for any.
  std::string target(std::max<std::size_t>(static_cast<std::size_t>(now.st_size), PATH_MAX) + 1, '\0');
  ssize_t n = ::readlinkat(link.get(), "", target.data(), target.size());
  if (n < 0) {
    return below(e.rel, errno);
  }
  target.resize(static_cast<std::size_t>(n));
  m_key.add(e.rel, now);
  if (m_streaming) {
    if (auto st = streamed(m_stream.header(TarType::symlink, e.rel, now, 0, target)); !st) {
      return st;
    }
  }
  if (m_copying) {
    if (::symlinkat(target.c_str(), dest_parent, e.name.c_str()) != 0) {
      return Error::from_errno("cannot create " + e.rel);
    }
    ++m_out.copied.symlinks;
  }
  return ok_status();
}

// One regular file: its header and data into the stream, its copy made, and whether it moved.
Status TreeReader::file(const fs::WalkEntry& e, int in, const struct stat& now, int dest_parent)
{
  (void)::fcntl(in, F_SETFL, ::fcntl(in, F_GETFL) & ~O_NONBLOCK);
  const auto size = static_cast<std::uint64_t>(now.st_size);
  stage::CopyStats& stats = m_out.copied;
  UniqueFd out;
  if (m_copying) {
    if (stats.bytes + size > m_max) {
      return over_limit(e.rel);
    }
    out = UniqueFd(::openat(dest_parent, e.name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                            (now.st_mode & 0777) | S_IWUSR));
    if (!out.valid()) {
      return Error::from_errno("cannot create " + e.rel);
    }
  }
  if (m_streaming) {
    if (auto st = streamed(m_stream.header(TarType::file, e.rel, now, size)); !st) {
      return st;
    }
  }
  if (!m_streaming) { // the stream is gone: a copy as without the daemon
    if (auto st = stage::copy_into(in, out.get(), m_max, stats, e.rel); !st) {
      return st;
    }
  } else {
    auto piped = size >= k_splice_from ? piped_data(in, out.get(), size) : Result<std::uint64_t>(0);
    auto done = piped ? small_data(in, out.get(), size - *piped, *piped) : piped;
    if (!done) {
      return done.error().with_context(e.rel);
    }
    const std::uint64_t got = *piped + *done;
    m_out.streamed.changed = m_out.streamed.changed || got < size; // shrank: the stream is padded
    if (m_streaming) {
      if (auto st = streamed(m_stream.zeros(static_cast<std::size_t>(size - got) + archive::tar_padding(size))); !st) {
        return st;
      }
    }
    // What the file grew by while it was read goes to the copy alone (as staging without the
    // daemon copies to the end); the stream keeps the size its header gave.
    const std::uint64_t used = stats.bytes + got;
    auto rest = m_copying ? copy_rest(in, out.get(), m_max > used ? m_max - used : 0) : Result<std::uint64_t>(0);
    if (!rest) {
      return rest.error().with_context(e.rel);
    }
    m_out.streamed.changed = m_out.streamed.changed || *rest > 0;
    stats.bytes += got + *rest;
    ++stats.files;
    if (stats.counters) {
      stats.counters->entries.fetch_add(1, std::memory_order_relaxed);
    }
    if (m_copying && ::fchmod(out.get(), now.st_mode & 0777) != 0) {
      return Error::from_errno(e.rel + ": cannot set the mode of the copy");
    }
    if (m_copying) {
      stage::keep_mtime(out.get(), now);
    }
  }
  keep_up();
  // The bytes sent are those of the stat keyed only if nothing about the file moved meanwhile.
  struct stat after {};
  m_out.streamed.changed = m_out.streamed.changed || ::fstat(in, &after) != 0 || !same_file(after, now);
  return ok_status();
}

// Up to `size` bytes read into the stream's buffer and written from it to the copy (`out` < 0:
// none), after `already` bytes of the file: how many there were.
Result<std::uint64_t> TreeReader::small_data(int in, int out, std::uint64_t size, std::uint64_t already)
{
  std::uint64_t done = 0;
  while (done < size && m_streaming) {
    const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(size - done, archive::TarStreamWriter::capacity()));
    auto room = m_stream.room(want);
    if (!room) {
      if (auto st = streamed(room.error()); !st) {
        return st.error();
      }
      break;
    }
    auto got = fs::read_some(in, room->data(), want, "");
    if (!got) {
      return got.error();
    }
    if (*got == 0) {
      return done; // shrank
    }
    if (out >= 0) {
      if (auto st = fs::write_all(out, std::string_view(room->data(), *got), "cannot write the copy"); !st) {
        return st.error();
      }
    }
    m_stream.commit(*got);
    copied(out >= 0 ? *got : 0);
    done += *got;
    keep_up();
  }
  if (done < size && !m_streaming) { // the stream went on the way: the rest to the copy alone
    auto rest = copy_rest(in, out, m_max - m_out.copied.bytes - already - done);
    if (!rest) {
      return rest.error();
    }
    done += *rest;
  }
  return done;
}

// A large file's data: spliced from the source into a pipe (page references), teed to the stream
// and moved to the copy, so that no byte passes through this process. 0 when the source cannot be
// spliced (small_data reads it instead).
Result<std::uint64_t> TreeReader::piped_data(int in, int out, std::uint64_t size)
{
  if (!m_pipe_rd.valid()) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) {
      return Error::from_errno("pipe");
    }
    m_pipe_rd = UniqueFd(p[0]);
    m_pipe_wr = UniqueFd(p[1]);
    (void)::fcntl(p[1], F_SETPIPE_SZ, static_cast<int>(k_chunk)); // best effort
  }
  if (auto st = streamed(m_stream.flush()); !st) { // the header before the data
    return st.error();
  }
  std::uint64_t done = 0;
  while (done < size) {
    const ssize_t n = ::splice(in, nullptr, m_pipe_wr.get(), nullptr,
                               static_cast<std::size_t>(std::min<std::uint64_t>(size - done, k_chunk)), SPLICE_F_MOVE);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0 && done == 0 && (errno == EINVAL || errno == ENOSYS)) {
      return std::uint64_t{0};
    }
    if (n < 0) {
      return Error::from_errno("cannot read");
    }
    if (n == 0) {
      break; // shrank
    }
    for (auto left = static_cast<std::size_t>(n); left > 0;) {
      std::size_t k = left;
      if (m_streaming && out >= 0) {
        const ssize_t t = ::tee(m_pipe_rd.get(), m_stream.fd(), left, SPLICE_F_NONBLOCK);
        if (t < 0 && (errno == EINTR || errno == EAGAIN)) {
          if (errno == EAGAIN) { // the stream's pipe is full: wait, within the copy's patience
            (void)streamed(m_stream.wait_writable());
          }
          continue;
        }
        if (t <= 0) {
          (void)streamed(Error::from_errno("tee"));
        } else {
          k = static_cast<std::size_t>(t);
          keep_up();
        }
      }
      if (auto st = move_to_copy(out >= 0 ? out : m_stream.fd(), k); !st) {
        return out >= 0 ? st.error() : st.error().with_context("the stream to the cache");
      }
      copied(out >= 0 ? k : 0);
      left -= k;
    }
    done += static_cast<std::uint64_t>(n);
  }
  return done;
}

// Exactly `n` bytes from the head of the pipe into `out` (the copy; or the stream when there is no
// copy): spliced, or read and written where `out` takes no splice.
Status TreeReader::move_to_copy(int out, std::size_t n)
{
  while (n > 0) {
    const ssize_t m = ::splice(m_pipe_rd.get(), nullptr, out, nullptr, n, SPLICE_F_MOVE);
    if (m < 0 && errno == EINTR) {
      continue;
    }
    if (m < 0 && errno == EINVAL) {
      m_buf.resize(k_chunk);
      auto got = fs::read_some(m_pipe_rd.get(), m_buf.data(), std::min(n, m_buf.size()), "");
      if (!got) {
        return got.error();
      }
      if (auto st = fs::write_all(out, std::string_view(m_buf.data(), *got), "cannot write the copy"); !st) {
        return st;
      }
      n -= *got;
      continue;
    }
    if (m <= 0) {
      return Error::from_errno("cannot write the copy");
    }
    n -= static_cast<std::size_t>(m);
  }
  return ok_status();
}

// The rest of the file open at `in`, to its end, into the copy alone: at most `room` bytes.
Result<std::uint64_t> TreeReader::copy_rest(int in, int out, std::uint64_t room)
{
  stage::CopyStats rest; // its own count: the file is counted once, by its caller
  if (auto st = stage::copy_into(in, out, room, rest, ""); !st) {
    return st.error();
  }
  copied(rest.bytes);
  return rest.bytes;
}

Status TreeReader::end()
{
  if (!m_streaming) {
    return ok_status();
  }
  return streamed(m_stream.finish());
}

TreeRead TreeReader::result()
{
  m_out.streamed.identity = SourceIdentity{m_key.key(), m_key.files(), m_key.bytes(), m_key.newest_ns()};
  return std::move(m_out);
}

} // namespace

Result<TreeRead> read_tree(int dir_fd, int dest_dir_fd, int out_fd, std::uint64_t max_bytes,
                           const std::string& canonical_path, const std::string& shown, const TreeReadOptions& options)
{
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, nullptr);
  struct stat root {};
  if (::fstat(dir_fd, &root) != 0) {
    return Error::from_errno(shown);
  }
  const bool copying = dest_dir_fd >= 0;
  TreeReader r(out_fd, copying, max_bytes, canonical_path, shown, options);
  r.add_root(root);
  Status walked = ok_status();
  if (copying) {
    walked = fs::copy_walk(dir_fd, dest_dir_fd, shown,
                           [&](const fs::WalkEntry& e, int dest_parent) { return r.entry(e, dest_parent); },
                           stage::finish_dir);
  } else {
    walked = fs::walk_tree(dir_fd, [&](const fs::WalkEntry& e) -> Result<fs::WalkControl> {
      auto placed = r.entry(e, -1);
      if (!placed) {
        return placed.error();
      }
      return fs::WalkControl::go_on;
    });
  }
  if (!walked) {
    return walked.error();
  }
  if (copying) {
    stage::finish_dir(dest_dir_fd, root); // the root after everything below it
  }
  if (auto st = r.end(); !st) {
    return Error::io(shown + ": the stream to the cache broke", EPIPE);
  }
  return r.result();
}

Result<StreamResult> stream_tree(int dir_fd, int out_fd, const std::string& canonical_path, const std::string& shown)
{
  auto read = read_tree(dir_fd, -1, out_fd, 0, canonical_path, shown);
  if (!read) {
    return read.error();
  }
  return read->streamed;
}

} // namespace stagehand::cache
