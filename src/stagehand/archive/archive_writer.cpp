// ArchiveWriter: directories, files (streamed or queued), symlinks and hard links of one archive.
#include "stagehand/archive/archive_writer.hpp"

#include "stagehand/archive/entry_path.hpp"
#include "stagehand/archive/new_file.hpp"
#include "stagehand/util/strings.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace stagehand::archive {

namespace {

// A path this writer built ("a/b", or "" for the destination) back into components.
std::vector<std::string> components(const std::string& path)
{
  std::vector<std::string> parts;
  if (!path.empty()) {
    for (std::string_view part : split(path, '/')) {
      parts.emplace_back(part);
    }
  }
  return parts;
}

// The archive's modes (a cache view shows them to the job as its own) without group/other write:
// the cache's files are root's once published, and a hard-linked hit must not write them; while
// the service user fills them, nobody else may open them for writing (its children's filter
// refuses such modes: util/child_filter.hpp). A file others may not read is copied, not linked,
// into a job (materialise.cpp).
mode_t cache_file_mode(mode_t mode) { return mode & 0755; }

FileMeta meta_of(struct archive_entry* e, FileModes modes)
{
  FileMeta m;
  m.size = static_cast<std::uint64_t>(archive_entry_size(e));
  m.mode = archive_entry_perm(e) & 0777; // never setuid, setgid or sticky
  if (modes == FileModes::read_only) {
    m.mode = cache_file_mode(m.mode);
  }
  m.mtime = {archive_entry_mtime(e), archive_entry_mtime_nsec(e)};
  return m;
}

Error too_many_bytes(std::uint64_t limit)
{
  return Error::limit("unpacks to more than " + std::to_string(limit) + " bytes (limit)");
}

} // namespace

ArchiveWriter::ArchiveWriter(int dest_fd, const ExtractLimits& limits, unsigned threads)
  : m_limits(limits), m_dirs(dest_fd), m_pool(threads, k_queue_bytes)
{
}

ExtractStats ArchiveWriter::stats() const
{
  ExtractStats s = m_stats;
  s.dirs += m_dirs.created();
  return s;
}

namespace {

// A name as this locale shows it, else its UTF-8 bytes (a pax header's non-ASCII name under the
// C locale of slurmstepd: written as the UTF-8 that GNU tar and Python's tarfile would write).
// The UTF-8 form is a charset conversion: asked for only when the locale's form is missing.
using EntryText = const char* (*)(struct archive_entry*);
const char* entry_text(struct archive_entry* e, EntryText in_locale, EntryText utf8)
{
  const char* s = in_locale(e);
  return s ? s : utf8(e);
}

} // namespace

namespace {

std::uint64_t path_hash(std::string_view path) { return std::hash<std::string_view>{}(path); }

} // namespace

bool ArchiveWriter::dir_touches_queued(std::string_view dir) const
{
  for (std::size_t j = dir.find('/');; j = dir.find('/', j + 1)) {
    if (!dir.empty() && m_queued.contains(path_hash(dir.substr(0, j)))) {
      return true;
    }
    if (j == std::string_view::npos) {
      return false;
    }
  }
}

bool ArchiveWriter::touches_queued(std::string_view dir, std::uint64_t hash, const char* link_target)
{
  if (m_queued.empty()) {
    return false;
  }
  // A hash collision only makes an entry wait when it need not. The directories on the way are
  // checked once per directory: entries come grouped by directory.
  if (!m_clear_dir || *m_clear_dir != dir) {
    if (dir_touches_queued(dir)) {
      return true;
    }
    m_clear_dir.emplace(dir);
  }
  if (m_queued.contains(hash)) {
    return true;
  }
  if (link_target) { // the target itself and every directory on its way
    auto parts = split_entry_path(link_target);
    return parts && dir_touches_queued(join(*parts, "/"));
  }
  return false;
}

Status ArchiveWriter::Batch::write() const
{
  const char* base = bytes.data();
  for (const auto& f : files) {
    auto st = write_new_file(dirs[f.dir]->get(), base + f.name, base + f.shown, f.meta,
                             std::string_view(base + f.data, f.data_len));
    if (!st) {
      return st;
    }
  }
  return ok_status();
}

void ArchiveWriter::flush_batch()
{
  if (m_batch.files.empty()) {
    return;
  }
  const std::size_t cost = std::max(m_batch.data_bytes, k_queue_bytes / k_max_queued_batches);
  if (m_batch.dirs.front().get() != m_lane_dir) { // a new directory: the next writer's lane
    m_lane_dir = m_batch.dirs.front().get();
    ++m_lane;
  }
  m_pool.submit(
    [this, batch = std::move(m_batch)]() mutable {
      auto st = batch.write();
      m_spare.give(std::move(batch.bytes));
      return st;
    },
    cost, m_lane);
  m_batch = Batch{};
}

std::string ArchiveWriter::SpareBuffers::take()
{
  std::lock_guard lock(m_mutex);
  if (m_spare.empty()) {
    std::string fresh;
    fresh.reserve(k_batch_bytes / 2);
    return fresh;
  }
  std::string bytes = std::move(m_spare.back());
  m_spare.pop_back();
  return bytes;
}

void ArchiveWriter::SpareBuffers::give(std::string bytes)
{
  bytes.clear();
  std::lock_guard lock(m_mutex);
  if (m_spare.size() < k_max_queued_batches) { // more are never in flight at once
    m_spare.push_back(std::move(bytes));
  }
}

Status ArchiveWriter::drain()
{
  flush_batch();
  if (!m_queued.empty()) {
    m_queued.clear();
  }
  return m_pool.drain();
}

Error ArchiveWriter::abandon(Error e)
{
  m_batch = Batch{};
  m_pool.cancel(); // what waits is never written: the caller removes the destination
  if (auto earlier = m_pool.drain(); !earlier) {
    return earlier.error(); // a writer thread failed on an earlier entry: that is the first error
  }
  return e;
}

Result<bool> ArchiveWriter::name_entry(std::string_view raw, Entry& cur)
{
  cur.in_last_dir = false;
  if (m_last_dir && raw.size() <= k_max_entry_path && raw.size() > m_last_dir->spelled.size() &&
      raw.starts_with(m_last_dir->spelled)) {
    // Same directory, same spelling: split_entry_path would give its checked parts plus this name.
    const std::string_view name = raw.substr(m_last_dir->spelled.size());
    if (name.find('/') == std::string_view::npos && name != "." && name != "..") {
      cur.in_last_dir = true;
      cur.name.assign(name);
      cur.rel.assign(m_last_dir->rel);
      cur.shown.assign(cur.rel);
      if (!cur.rel.empty()) {
        cur.shown += '/';
      }
      cur.shown += cur.name;
      return true;
    }
  }
  auto parts = split_entry_path(raw);
  if (!parts) {
    return parts.error();
  }
  if (parts->empty()) {
    return false;
  }
  cur.name = std::move(parts->back());
  parts->pop_back();
  cur.parts = std::move(*parts);
  cur.rel = join(cur.parts, "/");
  cur.shown = cur.rel.empty() ? cur.name : cur.rel + "/" + cur.name;
  return true;
}

Result<fs::SharedFd> ArchiveWriter::open_parent(std::string_view raw, const Entry& cur)
{
  if (cur.in_last_dir) {
    return m_last_dir->fd;
  }
  auto parent = m_dirs.open(cur.parts);
  if (!parent) {
    return parent.error().with_context("entry \"" + std::string(raw) + "\"");
  }
  // Remembered when the name ends in this entry's own name ("./a/b/c", not "a/b/" or "a/b/."):
  // then the spelling before it splits to exactly cur.parts.
  if (raw.ends_with(cur.name) && (raw.size() == cur.name.size() || raw[raw.size() - cur.name.size() - 1] == '/')) {
    m_last_dir = LastDir{std::string(raw.substr(0, raw.size() - cur.name.size())), cur.rel, *parent};
  }
  return parent;
}

Status ArchiveWriter::entry(struct archive* a, struct archive_entry* e)
{
  if (++m_entries > m_limits.max_entries) {
    return Error::limit("more than " + std::to_string(m_limits.max_entries) + " entries (limit)");
  }
  if (m_limits.counters) {
    m_limits.counters->entries.store(m_entries, std::memory_order_relaxed);
  }
  const char* raw_name = entry_text(e, archive_entry_pathname, archive_entry_pathname_utf8);
  const std::string_view raw(raw_name ? raw_name : "");
  auto named = name_entry(raw, m_entry);
  if (!named) {
    return named.error();
  }
  if (!*named) {
    return ok_status(); // "." or "./": the destination itself
  }
  const mode_t type = archive_entry_filetype(e);
  const char* link_target = entry_text(e, archive_entry_hardlink, archive_entry_hardlink_utf8);
  // Entries run in archive order except small new files, which writer threads write in batches:
  // an entry that touches a path they may still be writing waits for them first.
  const std::uint64_t hash = m_pool.parallel() ? path_hash(m_entry.shown) : 0;
  if (m_pool.parallel() && (m_queued.size() >= k_max_remembered || m_pool.failed() ||
                            touches_queued(m_entry.rel, hash, link_target))) {
    if (auto st = drain(); !st) {
      return st;
    }
  }
  auto parent = open_parent(raw, m_entry); // held until this entry is done
  if (!parent) {
    return parent.error();
  }
  const int pfd = (*parent)->get();
  if (link_target) {
    return hardlink(m_entry, pfd, link_target);
  }
  switch (type) {
  case AE_IFDIR:
    return directory(m_entry, pfd, e);
  case AE_IFREG:
    if (m_pool.parallel() && archive_entry_size(e) <= static_cast<la_int64_t>(k_small_file)) {
      return queue_file(m_entry, a, std::move(*parent), e, hash);
    }
    return regular_file(m_entry, a, pfd, e);
  case AE_IFLNK:
    return symlink(m_entry, pfd, entry_text(e, archive_entry_symlink, archive_entry_symlink_utf8));
  default:
    ++m_stats.skipped_special; // devices, FIFOs, sockets are never created
    return ok_status();
  }
}

Status ArchiveWriter::finish()
{
  if (auto st = drain(); !st) {
    return st;
  }
  // Directory modes and times last: adding entries changed their mtimes, and a read-only mode
  // would have stopped us from adding them.
  for (auto it = m_dir_times.rbegin(); it != m_dir_times.rend(); ++it) {
    auto fd = m_dirs.open(components(it->path));
    if (!fd) {
      return fd.error();
    }
    struct timespec times[2] = {{0, UTIME_OMIT}, it->mtime};
    if (::fchmod((*fd)->get(), it->mode) != 0 || ::futimens((*fd)->get(), times) != 0) {
      return Error::from_errno("cannot set the mode of " + it->path);
    }
  }
  m_last_dir.reset();
  m_dirs.clear();
  return ok_status();
}

Status ArchiveWriter::directory(const Entry& cur, int parent, struct archive_entry* e)
{
  if (::mkdirat(parent, cur.name.c_str(), 0700) == 0) {
    ++m_stats.dirs;
  } else if (errno != EEXIST) {
    return Error::from_errno("cannot create directory " + cur.name);
  }
  if (auto fd = m_dirs.open(components(cur.shown)); !fd) { // refuses a symlink or file at that name
    return fd.error();
  }
  mode_t mode = (archive_entry_perm(e) & 0777) | S_IRWXU;
  if (m_limits.file_modes == FileModes::read_only) {
    mode = cache_file_mode(mode); // nor group/other write on a directory of the cache's
  }
  struct timespec mtime {archive_entry_mtime(e), archive_entry_mtime_nsec(e)};
  m_dir_times.push_back(DirTimes{cur.shown, mode, mtime});
  return ok_status();
}

template<typename Sink> Status ArchiveWriter::read_blocks(const Entry& cur, struct archive* a, Sink&& sink)
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
      return Error::corrupt(std::string("corrupt data in \"") + cur.shown +
                            "\": " + (archive_error_string(a) ? archive_error_string(a) : "read error"));
    }
    m_stats.bytes += size;
    if (m_limits.counters) {
      m_limits.counters->bytes.store(m_stats.bytes, std::memory_order_relaxed);
    }
    if (m_stats.bytes > m_limits.max_bytes) {
      return too_many_bytes(m_limits.max_bytes);
    }
    if (offset < 0) {
      return Error::corrupt("corrupt data in \"" + cur.shown + "\": negative offset");
    }
    if (auto st = sink(static_cast<const char*>(buf), size, static_cast<std::uint64_t>(offset)); !st) {
      return st;
    }
  }
}

// A large file: the reader streams its blocks straight into it.
Status ArchiveWriter::regular_file(const Entry& cur, struct archive* a, int parent, struct archive_entry* e)
{
  const FileMeta meta = meta_of(e, m_limits.file_modes);
  if (meta.size > m_limits.max_bytes) { // a sparse tail counts as written
    return too_many_bytes(m_limits.max_bytes);
  }
  auto st = write_new_file(parent, cur.name.c_str(), cur.shown, meta,
                           [&](const BlockSink& sink) { return read_blocks(cur, a, sink); });
  if (!st) {
    return st;
  }
  ++m_stats.files;
  return ok_status();
}

// A small file: read into the batch here, written by a writer thread with the rest of the batch.
Status ArchiveWriter::queue_file(const Entry& cur, struct archive* a, fs::SharedFd parent, struct archive_entry* e,
                                 std::uint64_t hash)
{
  const FileMeta meta = meta_of(e, m_limits.file_modes);
  std::string& bytes = m_batch.bytes;
  if (m_batch.files.empty()) {
    bytes = m_spare.take();
  }
  const std::size_t start = bytes.size();
  Batch::File f{m_batch.dirs.size(), start, 0, 0, 0, meta};
  const bool new_dir = m_batch.dirs.empty() || m_batch.dirs.back() != parent;
  if (!new_dir) {
    --f.dir;
  }
  bytes.append(cur.name.c_str(), cur.name.size() + 1); // with its NUL
  f.shown = bytes.size();
  bytes.append(cur.shown.c_str(), cur.shown.size() + 1);
  f.data = bytes.size();
  auto read = read_blocks(cur, a, [&](const char* p, std::size_t size, std::uint64_t offset) -> Status {
    const std::uint64_t end = offset + size;
    if (end > meta.size) {
      return Error::corrupt("corrupt data in \"" + cur.shown + "\": more data than its declared size");
    }
    const std::size_t have = bytes.size() - f.data;
    if (offset == have) {
      bytes.append(p, size); // the usual case: the next bytes, no zero fill first
      return ok_status();
    }
    if (have < end) {
      bytes.resize(f.data + end); // sparse holes read as zeros
    }
    if (size > 0) {
      std::memcpy(bytes.data() + f.data + offset, p, size);
    }
    return ok_status();
  });
  if (!read) {
    bytes.resize(start);
    return read;
  }
  f.data_len = bytes.size() - f.data;
  ++m_stats.files;
  m_queued.insert(hash);
  if (m_clear_dir && m_clear_dir->starts_with(cur.shown)) { // a file where a directory was seen clear
    m_clear_dir.reset();
  }
  if (new_dir) {
    m_batch.dirs.push_back(std::move(parent));
  }
  m_batch.files.push_back(f);
  m_batch.data_bytes += f.data_len;
  if (m_batch.files.size() >= k_batch_files || m_batch.data_bytes >= k_batch_bytes ||
      m_batch.dirs.size() >= k_batch_dirs) {
    flush_batch();
  }
  return ok_status();
}

Status ArchiveWriter::symlink(const Entry& cur, int parent, const char* target)
{
  if (!target || !*target) {
    return Error::corrupt("symlink \"" + cur.shown + "\" has no target");
  }
  if (auto st = make_room(parent, cur.name.c_str(), cur.shown); !st) {
    return st;
  }
  // The link may point anywhere: it is only ever created, never followed by the writer.
  if (::symlinkat(target, parent, cur.name.c_str()) != 0) {
    return Error::from_errno("cannot create symlink " + cur.shown);
  }
  ++m_stats.symlinks;
  return ok_status();
}

Status ArchiveWriter::hardlink(const Entry& cur, int parent, const char* target)
{
  const std::string& shown = cur.shown;
  auto tparts = split_entry_path(target);
  if (!tparts || tparts->empty()) {
    return Error::refused("hard link \"" + shown + "\" -> \"" + target + "\": target outside the archive: refused");
  }
  const std::string tname = tparts->back();
  tparts->pop_back();
  auto tparent = m_dirs.open(*tparts, fs::MissingDirs::refuse); // a target's directories exist already
  if (!tparent) {
    if (tparent.error().code == ENOENT) {
      return Error::refused("hard link \"" + shown + "\" -> \"" + target + "\": not a file unpacked earlier: refused");
    }
    return tparent.error().with_context("hard link \"" + shown + "\"");
  }
  const int tfd = (*tparent)->get();
  struct stat st {};
  if (::fstatat(tfd, tname.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
    return Error::refused("hard link \"" + shown + "\" -> \"" + target + "\": not a file unpacked earlier: refused");
  }
  if (auto room = make_room(parent, cur.name.c_str(), shown); !room) {
    return room;
  }
  if (::linkat(tfd, tname.c_str(), parent, cur.name.c_str(), 0) != 0) {
    return Error::from_errno("cannot create hard link " + shown);
  }
  ++m_stats.hardlinks;
  return ok_status();
}

} // namespace stagehand::archive
