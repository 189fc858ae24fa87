// Archive extraction: libarchive's reader, our own fd-relative writer with a directory-fd cache.
#include "stagehand/stage/extract.hpp"
#include "stagehand/util/strings.hpp"

#include "stagehand/stage/entry_path.hpp"
#include "stagehand/util/fd.hpp"

#include <archive.h>
#include <cstring>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace stagehand::stage {

namespace {

constexpr std::size_t k_dir_cache_max = 1024;
constexpr std::size_t k_small_file = 1U << 20;     // files up to this size go to writer threads
constexpr std::size_t k_queue_bytes = 64U << 20;   // data buffered for writer threads, at most

struct ArchiveCloser
{
  void operator()(struct archive* a) const { archive_read_free(a); }
};
using ArchivePtr = std::unique_ptr<struct archive, ArchiveCloser>;

// Only the formats and filters stagehand promises; everything else is "not an archive".
Result<ArchivePtr> open_reader(int fd)
{
  if (::lseek(fd, 0, SEEK_SET) != 0) {
    return Error::from_errno("cannot rewind the archive");
  }
  ArchivePtr a(archive_read_new());
  if (!a) {
    return Error{ENOMEM, "cannot allocate an archive reader"};
  }
  archive_read_support_format_tar(a.get());
  archive_read_support_format_gnutar(a.get());
  archive_read_support_format_zip(a.get());
  archive_read_support_filter_gzip(a.get());
  archive_read_support_filter_bzip2(a.get());
  archive_read_support_filter_xz(a.get());
  archive_read_support_filter_zstd(a.get());
  if (archive_read_open_fd(a.get(), fd, 1 << 20) != ARCHIVE_OK) {
    return Error::invalid(archive_error_string(a.get()) ? archive_error_string(a.get()) : "cannot read");
  }
  return a;
}

// The process umask, read without calling umask() (which changes it and is not thread-safe).
mode_t current_umask()
{
  static const mode_t um = [] {
    mode_t value = 022;
    if (FILE* f = std::fopen("/proc/self/status", "re")) {
      char line[256];
      while (std::fgets(line, sizeof line, f)) {
        unsigned v = 0;
        if (std::sscanf(line, "Umask: %o", &v) == 1) {
          value = static_cast<mode_t>(v);
          break;
        }
      }
      std::fclose(f);
    }
    return value;
  }();
  return um;
}

using SharedFd = std::shared_ptr<UniqueFd>;

// One small regular file, complete in memory, to be written by any writer thread.
struct FileJob
{
  SharedFd parent; // keeps the directory fd open while the job waits
  std::string name;
  std::string shown;
  std::string data;
  std::uint64_t size = 0; // declared size (a sparse tail is a truncate)
  mode_t mode = 0;
  struct timespec mtime {};
};

// Removes a non-directory entry at `name` so a later entry replaces it (tar's semantics); a
// directory is never replaced.
Status make_room(int parent, const std::string& name, const std::string& shown)
{
  struct stat st {};
  if (::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return ok_status();
  }
  if (S_ISDIR(st.st_mode)) {
    return Error{EISDIR, "entry \"" + shown + "\" would replace a directory: refused"};
  }
  if (::unlinkat(parent, name.c_str(), 0) != 0) {
    return Error::from_errno("cannot replace " + shown);
  }
  return ok_status();
}

// Creates a file with O_EXCL|O_NOFOLLOW in its parent's fd (replacing a file or symlink already
// there, never writing through it) and writes it.
Status write_new_file(int parent, const std::string& name, const std::string& shown, const char* data,
                      std::size_t len, std::uint64_t size, mode_t mode, const struct timespec& mtime)
{
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  UniqueFd fd(::openat(parent, name.c_str(), flags, mode));
  if (!fd.valid() && errno == EEXIST) {
    if (auto st = make_room(parent, name, shown); !st) {
      return st;
    }
    fd.reset(::openat(parent, name.c_str(), flags, mode));
  }
  if (!fd.valid()) {
    return Error::from_errno("cannot create " + shown);
  }
  while (len > 0) {
    ssize_t n = ::write(fd.get(), data, len);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return Error::from_errno("cannot write " + shown);
    }
    data += n;
    len -= static_cast<std::size_t>(n);
  }
  if (size > 0 && ::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    return Error::from_errno("cannot write " + shown);
  }
  if ((mode & current_umask()) != 0 && ::fchmod(fd.get(), mode) != 0) {
    return Error::from_errno("cannot set the mode of " + shown);
  }
  struct timespec times[2] = {{0, UTIME_OMIT}, mtime};
  ::futimens(fd.get(), times);
  return ok_status();
}

// Writer threads for small files. Only fd-relative calls, no umask: safe in parallel.
class WriterPool
{
public:
  explicit WriterPool(unsigned threads)
  {
    for (unsigned i = 0; i < threads; ++i) {
      m_threads.emplace_back([this] { run(); });
    }
  }
  ~WriterPool()
  {
    {
      std::lock_guard lock(m_mutex);
      m_stop = true;
    }
    m_cv.notify_all();
    for (auto& t : m_threads) {
      t.join();
    }
  }

  bool parallel() const { return !m_threads.empty(); }

  void submit(FileJob job)
  {
    std::unique_lock lock(m_mutex);
    m_space.wait(lock, [&] { return m_queued_bytes < k_queue_bytes || m_jobs.empty(); });
    m_queued_bytes += job.data.size();
    m_jobs.push_back(std::move(job));
    m_cv.notify_one();
  }

  // Waits until every submitted job is written; returns the first error of any.
  Status drain()
  {
    std::unique_lock lock(m_mutex);
    m_idle.wait(lock, [&] { return m_jobs.empty() && m_busy == 0; });
    if (m_error) {
      return *m_error;
    }
    return ok_status();
  }

  bool failed()
  {
    std::lock_guard lock(m_mutex);
    return m_error.has_value();
  }

private:
  void run()
  {
    for (;;) {
      FileJob job;
      {
        std::unique_lock lock(m_mutex);
        m_cv.wait(lock, [&] { return m_stop || !m_jobs.empty(); });
        if (m_jobs.empty()) {
          return;
        }
        job = std::move(m_jobs.front());
        m_jobs.pop_front();
        m_queued_bytes -= job.data.size();
        ++m_busy;
      }
      m_space.notify_one();
      Status st = ok_status();
      if (!failed()) {
        st = write_new_file(job.parent->get(), job.name, job.shown, job.data.data(), job.data.size(), job.size,
                            job.mode, job.mtime);
      }
      {
        std::lock_guard lock(m_mutex);
        if (!st && !m_error) {
          m_error = st.error();
        }
        --m_busy;
      }
      m_idle.notify_all();
    }
  }

  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::condition_variable m_space;
  std::condition_variable m_idle;
  std::deque<FileJob> m_jobs;
  std::size_t m_queued_bytes = 0;
  unsigned m_busy = 0;
  bool m_stop = false;
  std::optional<Error> m_error;
  std::vector<std::thread> m_threads;
};

struct DirTimes
{
  std::string path; // relative to the destination, "" for the root
  mode_t mode;
  struct timespec mtime;
};

class Writer
{
public:
  Writer(int dest_fd, const ExtractLimits& limits, std::string source, WriterPool& pool)
    : m_dest(dest_fd), m_limits(limits), m_source(std::move(source)), m_pool(pool)
  {
  }

  Status entry(struct archive* a, struct archive_entry* e)
  {
    if (++m_entries > m_limits.max_entries) {
      return fail("more than " + std::to_string(m_limits.max_entries) + " entries (limit)");
    }
    const char* raw_name = archive_entry_pathname(e);
    auto parts = split_entry_path(raw_name ? raw_name : "");
    if (!parts) {
      return fail(parts.error().message);
    }
    const mode_t type = archive_entry_filetype(e);
    if (parts->empty()) {
      return ok_status(); // "." or "./": the destination itself
    }
    const std::string name = parts->back();
    parts->pop_back();
    const std::string rel = join(*parts);
    auto parent = dir_fd(*parts);
    if (!parent) {
      return fail("entry \"" + std::string(raw_name) + "\": " + parent.error().message);
    }
    const std::string shown = rel.empty() ? name : rel + "/" + name;
    // Anything but a new small file runs in order: wait for the writer threads first.
    const bool queued = type == AE_IFREG && !archive_entry_hardlink(e) && m_pool.parallel() &&
                        archive_entry_size(e) <= static_cast<la_int64_t>(k_small_file) && m_written.insert(shown).second;
    if (!queued) {
      if (auto st = m_pool.drain(); !st) {
        return fail(st.error().message);
      }
    } else if (m_pool.failed()) {
      return fail(m_pool.drain().error().message);
    }
    if (const char* target = archive_entry_hardlink(e)) {
      return hardlink(*parent, name, target, shown);
    }
    switch (type) {
    case AE_IFDIR:
      return directory(*parent, rel, name, e);
    case AE_IFREG:
      return queued ? queue_file(a, rel, name, e, shown) : regular_file(a, *parent, name, e, shown);
    case AE_IFLNK:
      return symlink(*parent, name, archive_entry_symlink(e), shown);
    default:
      ++m_stats.skipped_special; // devices, FIFOs, sockets are never created
      return ok_status();
    }
  }

  Status finish()
  {
    if (auto st = m_pool.drain(); !st) {
      return fail(st.error().message);
    }
    // Directory modes and times last: adding entries changed their mtimes, and a read-only mode
    // would have stopped us from adding them.
    for (auto it = m_dir_times.rbegin(); it != m_dir_times.rend(); ++it) {
      std::vector<std::string> parts = components(it->path);
      auto fd = dir_fd(parts);
      if (!fd) {
        return fail(fd.error().message);
      }
      struct timespec times[2] = {{0, UTIME_OMIT}, it->mtime};
      if (::fchmod(*fd, it->mode) != 0 || ::futimens(*fd, times) != 0) {
        return fail_errno("cannot set the mode of " + it->path);
      }
    }
    m_cache.clear();
    return ok_status();
  }

  const ExtractStats& stats() const { return m_stats; }

private:
  static std::string join(const std::vector<std::string>& parts)
  {
    std::string s;
    for (const auto& p : parts) {
      s += (s.empty() ? "" : "/") + p;
    }
    return s;
  }

  // A path this writer built ("a/b", or "" for the destination) back into components.
  static std::vector<std::string> components(const std::string& path)
  {
    std::vector<std::string> parts;
    if (!path.empty()) {
      for (std::string_view part : stagehand::split(path, '/')) {
        parts.emplace_back(part);
      }
    }
    return parts;
  }

  Error fail(const std::string& why) const { return Error::invalid(m_source + ": " + why); }
  Error fail_errno(const std::string& why) const { return Error::from_errno(m_source + ": " + why); }

  // The fd of the directory `parts` below the destination, creating missing directories. Every
  // step is O_NOFOLLOW: a symlink (or a file) on the way is an error, never followed.
  Result<int> dir_fd(const std::vector<std::string>& parts)
  {
    auto fd = shared_dir_fd(parts);
    if (!fd) {
      return fd.error();
    }
    return *fd ? (*fd)->get() : m_dest;
  }

  // As dir_fd, but a reference that keeps the fd open (null for the destination itself).
  Result<SharedFd> shared_dir_fd(const std::vector<std::string>& parts)
  {
    if (parts.empty()) {
      return SharedFd();
    }
    std::string path;
    int cur = m_dest;
    std::size_t i = 0;
    // Start from the deepest cached ancestor.
    for (std::size_t k = parts.size(); k > 0; --k) {
      std::vector<std::string> prefix(parts.begin(), parts.begin() + static_cast<long>(k));
      auto it = m_cache.find(join(prefix));
      if (it != m_cache.end()) {
        if (k == parts.size()) {
          return it->second;
        }
        cur = it->second->get();
        i = k;
        path = it->first;
        break;
      }
    }
    for (; i < parts.size(); ++i) {
      const std::string& comp = parts[i];
      path += (path.empty() ? "" : "/") + comp;
      UniqueFd next(::openat(cur, comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!next.valid() && errno == ENOENT) {
        if (::mkdirat(cur, comp.c_str(), 0700) != 0 && errno != EEXIST) {
          return Error::from_errno("cannot create directory " + path);
        }
        ++m_stats.dirs;
        next.reset(::openat(cur, comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      }
      if (!next.valid()) {
        if (errno == ELOOP || errno == ENOTDIR) {
          return Error{errno, "\"" + path + "\" is a symlink or a file, not a directory: refused"};
        }
        return Error::from_errno(path);
      }
      if (m_cache.size() >= k_dir_cache_max) {
        m_cache.clear(); // bounded fds (queued jobs keep theirs); `cur` may dangle: restart
        return shared_dir_fd(parts);
      }
      cur = next.get();
      auto shared = std::make_shared<UniqueFd>(std::move(next));
      m_cache.emplace(path, shared);
      if (i + 1 == parts.size()) {
        return shared;
      }
    }
    return SharedFd(); // not reached: the loop returns at its last component
  }

  Status directory(int parent, const std::string& rel, const std::string& name, struct archive_entry* e)
  {
    if (::mkdirat(parent, name.c_str(), 0700) == 0) {
      ++m_stats.dirs;
    } else if (errno != EEXIST) {
      return fail_errno("cannot create directory " + name);
    }
    const std::string path = rel.empty() ? name : rel + "/" + name;
    auto fd = dir_fd(components(path)); // refuses a symlink or file at that name
    if (!fd) {
      return fail(fd.error().message);
    }
    mode_t mode = (archive_entry_perm(e) & 0777) | S_IRWXU;
    struct timespec mtime {archive_entry_mtime(e), archive_entry_mtime_nsec(e)};
    m_dir_times.push_back(DirTimes{path, mode, mtime});
    return ok_status();
  }

  Status regular_file(struct archive* a, int parent, const std::string& name, struct archive_entry* e,
                      const std::string& shown)
  {
    const mode_t mode = archive_entry_perm(e) & 0777; // never setuid, setgid or sticky
    const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
    UniqueFd fd(::openat(parent, name.c_str(), flags, mode));
    if (!fd.valid() && errno == EEXIST) { // a later entry of the same name replaces the earlier
      if (auto st = make_room(parent, name, shown); !st) {
        return fail(st.error().message);
      }
      fd.reset(::openat(parent, name.c_str(), flags, mode));
    }
    if (!fd.valid()) {
      return fail_errno("cannot create " + shown);
    }
    std::uint64_t end = 0;
    auto written = read_blocks(a, shown, [&](const char* p, std::size_t size, std::uint64_t offset) -> Status {
      while (size > 0) {
        ssize_t n = ::pwrite(fd.get(), p, size, static_cast<off_t>(offset));
        if (n < 0) {
          if (errno == EINTR) {
            continue;
          }
          return fail_errno("cannot write " + shown);
        }
        p += n;
        size -= static_cast<std::size_t>(n);
        offset += static_cast<std::uint64_t>(n);
      }
      end = offset;
      return ok_status();
    });
    if (!written) {
      return written;
    }
    const auto declared = static_cast<std::uint64_t>(archive_entry_size(e));
    if (declared > end) {
      if (declared > m_limits.max_bytes) {
        return fail("unpacks to more than " + std::to_string(m_limits.max_bytes) + " bytes (limit)");
      }
      if (::ftruncate(fd.get(), static_cast<off_t>(declared)) != 0) { // a sparse tail
        return fail_errno("cannot write " + shown);
      }
    }
    if ((mode & current_umask()) != 0 && ::fchmod(fd.get(), mode) != 0) {
      return fail_errno("cannot set the mode of " + shown);
    }
    struct timespec times[2] = {{0, UTIME_OMIT}, {archive_entry_mtime(e), archive_entry_mtime_nsec(e)}};
    ::futimens(fd.get(), times);
    ++m_stats.files;
    return ok_status();
  }

  // Feeds each data block of the current entry to `sink`, counting bytes against the limit.
  template<typename Sink> Status read_blocks(struct archive* a, const std::string& shown, Sink&& sink)
  {
    for (;;) {
      const void* buf = nullptr;
      size_t size = 0;
      la_int64_t offset = 0;
      int r = archive_read_data_block(a, &buf, &size, &offset);
      if (r == ARCHIVE_EOF) {
        return ok_status();
      }
      if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
        return fail(std::string("corrupt data in \"") + shown + "\": " +
                    (archive_error_string(a) ? archive_error_string(a) : "read error"));
      }
      m_stats.bytes += size;
      if (m_stats.bytes > m_limits.max_bytes) {
        return fail("unpacks to more than " + std::to_string(m_limits.max_bytes) + " bytes (limit)");
      }
      if (offset < 0) {
        return fail("corrupt data in \"" + shown + "\": negative offset");
      }
      if (auto st = sink(static_cast<const char*>(buf), size, static_cast<std::uint64_t>(offset)); !st) {
        return st;
      }
    }
  }

  // Reads a small file's data and hands it to a writer thread.
  Status queue_file(struct archive* a, const std::string& rel, const std::string& name, struct archive_entry* e,
                    const std::string& shown)
  {
    auto parent = shared_dir_fd(components(rel));
    if (!parent) {
      return fail(parent.error().message);
    }
    FileJob job;
    job.parent = *parent ? *parent : m_dest_shared;
    job.name = name;
    job.shown = shown;
    job.size = static_cast<std::uint64_t>(archive_entry_size(e));
    job.mode = archive_entry_perm(e) & 0777; // never setuid, setgid or sticky
    job.mtime = {archive_entry_mtime(e), archive_entry_mtime_nsec(e)};
    job.data.reserve(job.size);
    auto read = read_blocks(a, shown, [&](const char* p, std::size_t size, std::uint64_t offset) -> Status {
      const std::uint64_t end = offset + size;
      if (end > job.size) {
        return fail("corrupt data in \"" + shown + "\": more data than its declared size");
      }
      if (job.data.size() < end) {
        job.data.resize(end); // sparse holes read as zeros
      }
      std::memcpy(job.data.data() + offset, p, size);
      return ok_status();
    });
    if (!read) {
      return read;
    }
    ++m_stats.files;
    m_pool.submit(std::move(job));
    return ok_status();
  }

  Status symlink(int parent, const std::string& name, const char* target, const std::string& shown)
  {
    if (!target || !*target) {
      return fail("symlink \"" + shown + "\" has no target");
    }
    if (auto st = make_room(parent, name, shown); !st) {
      return fail(st.error().message);
    }
    // The link may point anywhere: it is only ever created, never followed by the writer.
    if (::symlinkat(target, parent, name.c_str()) != 0) {
      return fail_errno("cannot create symlink " + shown);
    }
    ++m_stats.symlinks;
    return ok_status();
  }

  Status hardlink(int parent, const std::string& name, const char* target, const std::string& shown)
  {
    auto tparts = split_entry_path(target);
    if (!tparts || tparts->empty()) {
      return fail("hard link \"" + shown + "\" -> \"" + target + "\": target outside the archive: refused");
    }
    const std::string tname = tparts->back();
    tparts->pop_back();
    auto tparent = dir_fd(*tparts);
    if (!tparent) {
      return fail("hard link \"" + shown + "\": " + tparent.error().message);
    }
    struct stat st {};
    if (::fstatat(*tparent, tname.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
      return fail("hard link \"" + shown + "\" -> \"" + target + "\": not a file unpacked earlier: refused");
    }
    if (auto room = make_room(parent, name, shown); !room) {
      return fail(room.error().message);
    }
    if (::linkat(*tparent, tname.c_str(), parent, name.c_str(), 0) != 0) {
      return fail_errno("cannot create hard link " + shown);
    }
    ++m_stats.hardlinks;
    return ok_status();
  }

  int m_dest;
  SharedFd m_dest_shared = std::make_shared<UniqueFd>(::fcntl(m_dest, F_DUPFD_CLOEXEC, 0));
  ExtractLimits m_limits;
  std::string m_source;
  ExtractStats m_stats;
  std::uint64_t m_entries = 0;
  WriterPool& m_pool;
  std::unordered_map<std::string, SharedFd> m_cache;
  std::unordered_set<std::string> m_written; // small files handed to the pool, by path
  std::vector<DirTimes> m_dir_times;
};

} // namespace

Result<ArchiveKind> probe_archive(int fd)
{
  auto a = open_reader(fd);
  ArchiveKind kind = ArchiveKind::not_an_archive;
  if (a) {
    struct archive_entry* e = nullptr;
    if (archive_read_next_header(a->get(), &e) == ARCHIVE_OK) {
      kind = ArchiveKind::archive;
    }
  }
  if (::lseek(fd, 0, SEEK_SET) != 0) {
    return Error::from_errno("cannot rewind");
  }
  return kind;
}

Result<ExtractStats> extract_archive(int archive_fd, int dest_fd, const ExtractLimits& limits,
                                     const std::string& source)
{
  auto a = open_reader(archive_fd);
  if (!a) {
    return Error::invalid(source + ": " + a.error().message);
  }
  (void)current_umask(); // read once before any thread starts
  const unsigned hw = std::thread::hardware_concurrency();
  const unsigned threads = limits.writer_threads == 0 ? (hw > 1 ? std::min(hw, 4U) : 0U)
                          : limits.writer_threads == 1 ? 0U // the reader writes everything itself
                                                       : limits.writer_threads;
  WriterPool pool(threads);
  Writer writer(dest_fd, limits, source, pool);
  for (;;) {
    struct archive_entry* e = nullptr;
    int r = archive_read_next_header(a->get(), &e);
    if (r == ARCHIVE_EOF) {
      break;
    }
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
      const char* msg = archive_error_string(a->get());
      return Error::invalid(source + ": corrupt archive: " + (msg ? msg : "read error"));
    }
    if (auto st = writer.entry(a->get(), e); !st) {
      return st.error();
    }
  }
  if (auto st = writer.finish(); !st) {
    return st.error();
  }
  return writer.stats();
}

} // namespace stagehand::stage
