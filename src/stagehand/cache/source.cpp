// Opening sources and streaming directories, as the job user.
#include "stagehand/cache/source.hpp"

#include "stagehand/fs/walk.hpp"
#include "stagehand/stage/source.hpp"

#include <archive.h>
#include <archive_entry.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <vector>

namespace stagehand::cache {

namespace {

struct WriterCloser
{
  void operator()(struct archive* a) const { archive_write_free(a); }
};
struct EntryCloser
{
  void operator()(struct archive_entry* e) const { archive_entry_free(e); }
};

bool same_file(const struct stat& a, const struct stat& b)
{
  return a.st_ino == b.st_ino && a.st_dev == b.st_dev && a.st_size == b.st_size &&
         a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec &&
         a.st_ctim.tv_sec == b.st_ctim.tv_sec && a.st_ctim.tv_nsec == b.st_ctim.tv_nsec;
}

} // namespace

Result<stage::OpenedSource> open_source_as(const std::string& path, const std::string& shown,
                                           std::optional<stage::SourceKind> expected,
                                           const std::vector<std::string>& allowed_roots)
{
  auto opened = stage::open_source(path, expected, allowed_roots);
  if (!opened) {
    if (opened.error().code == ENOENT) {
      return Error::refused(shown + ": vanished since submission", ENOENT);
    }
    return opened.error().with_context(shown);
  }
  return opened;
}

Result<UniqueFd> open_source(const std::string& path, const std::string& shown, stage::SourceKind expected,
                             const std::vector<std::string>& allowed_roots)
{
  auto opened = open_source_as(path, shown, expected, allowed_roots);
  if (!opened) {
    return opened.error();
  }
  return std::move(opened->fd);
}

namespace {

// A tar stream being written from a walk, and the identity of what went into it.
struct TarStream
{
  struct archive* a;
  const std::string& shown;
  KeyBuilder& key;
  StreamResult& result;
  std::vector<char>& buf; // for file contents
};

Status write_header(TarStream& t, struct archive_entry* entry)
{
  if (archive_write_header(t.a, entry) != ARCHIVE_OK) {
    return Error::io(t.shown + ": the stream to the cache broke: " + archive_error_string(t.a), EPIPE);
  }
  return ok_status();
}

// Read through an O_PATH open of the very link the walk listed: another one renamed there
// meanwhile is seen, never stored under this one's key.
Status stream_link(TarStream& t, const fs::WalkEntry& e, struct archive_entry* entry)
{
  UniqueFd link(::openat(e.parent_fd, e.name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  struct stat now {};
  if (!link.valid() || ::fstat(link.get(), &now) != 0 || !S_ISLNK(now.st_mode)) {
    return Error::refused(t.shown + "/" + e.rel + ": changed while staging", ESTALE);
  }
  t.result.changed = t.result.changed || !same_file(now, e.st);
  std::string target(static_cast<std::size_t>(now.st_size) + 1, '\0');
  ssize_t n = ::readlinkat(link.get(), "", target.data(), target.size());
  if (n < 0) {
    return Error::refused(t.shown + "/" + e.rel + ": " + std::strerror(errno), errno);
  }
  target.resize(static_cast<std::size_t>(n));
  t.key.add(e.rel, now);
  archive_entry_set_perm(entry, now.st_mode & 07777);
  archive_entry_set_mtime(entry, now.st_mtim.tv_sec, now.st_mtim.tv_nsec);
  archive_entry_set_filetype(entry, AE_IFLNK);
  archive_entry_set_symlink(entry, target.c_str());
  return write_header(t, entry);
}

// The contents of the file open at `in` (stat'ed as `now`) into the stream, noting a change.
Status stream_contents(TarStream& t, const fs::WalkEntry& e, int in, const struct stat& now)
{
  std::int64_t left = now.st_size;
  while (left > 0) {
    ssize_t n = ::read(in, t.buf.data(), static_cast<std::size_t>(std::min<std::int64_t>(left, t.buf.size())));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return Error::refused(t.shown + "/" + e.rel + ": " + std::strerror(errno), errno);
    }
    if (n == 0) {
      t.result.changed = true; // shrank: libarchive pads the entry
      break;
    }
    if (archive_write_data(t.a, t.buf.data(), static_cast<std::size_t>(n)) < 0) {
      return Error::io(t.shown + ": the stream to the cache broke", EPIPE);
    }
    left -= n;
  }
  // The bytes sent are those of the stat keyed only if nothing about the file moved meanwhile.
  struct stat after {};
  if (::fstat(in, &after) != 0 || !same_file(after, now)) {
    t.result.changed = true;
  }
  return ok_status();
}

// A directory or a regular file. Opened as the user, the open being the permission check, and
// keyed from what it holds (the same inode the walk listed, or refused): identify_tree's rule, so
// an unchanged tree gets the same key both times.
Status stream_opened(TarStream& t, const fs::WalkEntry& e, struct archive_entry* entry)
{
  struct stat now {};
  auto in = open_walked(e, t.shown, now);
  if (!in) {
    return in.error();
  }
  t.key.add(e.rel, now);
  t.result.changed = t.result.changed || !same_file(now, e.st);
  archive_entry_set_perm(entry, now.st_mode & 07777);
  archive_entry_set_mtime(entry, now.st_mtim.tv_sec, now.st_mtim.tv_nsec);
  if (S_ISDIR(now.st_mode)) {
    archive_entry_set_filetype(entry, AE_IFDIR);
    return write_header(t, entry);
  }
  archive_entry_set_filetype(entry, AE_IFREG);
  archive_entry_set_size(entry, now.st_size);
  if (auto st = write_header(t, entry); !st) {
    return st;
  }
  return stream_contents(t, e, in->get(), now);
}

// One entry of the walk into the stream.
Result<fs::WalkControl> stream_entry(TarStream& t, const fs::WalkEntry& e)
{
  std::unique_ptr<struct archive_entry, EntryCloser> entry(archive_entry_new());
  archive_entry_set_pathname(entry.get(), e.rel.c_str());
  Status streamed = ok_status();
  if (S_ISLNK(e.st.st_mode)) {
    streamed = stream_link(t, e, entry.get());
  } else if (!S_ISDIR(e.st.st_mode) && !S_ISREG(e.st.st_mode)) {
    t.key.add(e.rel, e.st); // devices, FIFOs, sockets are not staged
  } else {
    streamed = stream_opened(t, e, entry.get());
  }
  if (!streamed) {
    return streamed.error();
  }
  return fs::WalkControl::go_on;
}

} // namespace

Result<StreamResult> stream_tree(int dir_fd, int out_fd, const std::string& canonical_path, const std::string& shown)
{
  std::unique_ptr<struct archive, WriterCloser> a(archive_write_new());
  if (!a || archive_write_set_format_pax_restricted(a.get()) != ARCHIVE_OK ||
      archive_write_set_bytes_per_block(a.get(), 1 << 20) != ARCHIVE_OK || // a write(2) per MiB, not per 10 KiB
      archive_write_set_bytes_in_last_block(a.get(), 1) != ARCHIVE_OK ||
      archive_write_open_fd(a.get(), out_fd) != ARCHIVE_OK) {
    return Error::internal("cannot start a tar stream");
  }
  struct stat root {};
  if (::fstat(dir_fd, &root) != 0) {
    return Error::from_errno(shown);
  }
  KeyBuilder key(canonical_path, stage::SourceKind::dir, stage::Unpack::never);
  key.add("", root);
  StreamResult result;
  std::vector<char> buf(1U << 20);
  TarStream t{a.get(), shown, key, result, buf};
  auto wrote = fs::walk_tree(dir_fd, [&](const fs::WalkEntry& e) { return stream_entry(t, e); });
  if (!wrote) {
    return wrote.error();
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK) {
    return Error::io(shown + ": the stream to the cache broke", EPIPE);
  }
  result.identity = SourceIdentity{key.key(), key.files(), key.bytes(), key.newest_ns()};
  return result;
}

} // namespace stagehand::cache
