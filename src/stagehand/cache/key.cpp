// Source identity hashing.
#include "stagehand/cache/key.hpp"

#include "stagehand/fs/walk.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace stagehand::cache {

namespace {

constexpr std::uint64_t k_key_version = 1;

std::uint64_t ns(const struct timespec& t)
{
  return static_cast<std::uint64_t>(t.tv_sec) * 1000000000ULL + static_cast<std::uint64_t>(t.tv_nsec);
}

std::int64_t signed_ns(const struct timespec& t)
{
  return static_cast<std::int64_t>(t.tv_sec) * 1000000000LL + static_cast<std::int64_t>(t.tv_nsec);
}

Error changed_while_staging(const std::string& shown, const std::string& rel)
{
  return Error::refused(shown + "/" + rel + ": changed while staging", ESTALE);
}

} // namespace

std::function<void(const fs::WalkEntry&)>& walked_entry_hook()
{
  static std::function<void(const fs::WalkEntry&)> hook;
  return hook;
}

bool changed_near(const SourceIdentity& id, const struct timespec& started)
{
  const std::int64_t window = std::chrono::duration_cast<std::chrono::nanoseconds>(k_racy_window).count();
  return id.newest_ns >= signed_ns(started) - window;
}

Result<UniqueFd> open_walked(const fs::WalkEntry& e, const std::string& shown, struct stat& now)
{
  if (const auto& hook = walked_entry_hook()) {
    hook(e);
  }
  const bool dir = S_ISDIR(e.st.st_mode);
  // One name below the open parent: no symlink followed, no mount entered (EXDEV: a FUSE server
  // mounted there is asked nothing).
  auto fd = fs::open_beneath(e.parent_fd, e.name, dir ? O_RDONLY | O_DIRECTORY : O_RDONLY | O_NONBLOCK | O_NOCTTY);
  if (!fd) {
    switch (fd.error().code) {
    case EXDEV:
      return Error::refused(e.rel + ": another filesystem is mounted there: not entered", EXDEV);
    case ENOENT:
    case ELOOP:
    case ENOTDIR:
      return changed_while_staging(shown, e.rel); // renamed away, or a symlink or file put there
    default:
      return Error::refused(shown + "/" + e.rel + ": " + std::strerror(fd.error().code), fd.error().code);
    }
  }
  if (::fstat(fd->get(), &now) != 0) {
    return Error::from_errno(shown + "/" + e.rel);
  }
  if (now.st_dev != e.st.st_dev || now.st_ino != e.st.st_ino || (now.st_mode & S_IFMT) != (e.st.st_mode & S_IFMT)) {
    return changed_while_staging(shown, e.rel);
  }
  // A directory must be searchable as well: "." is looked up through the open one, never by name.
  if (dir && ::faccessat(fd->get(), ".", X_OK, AT_EACCESS) != 0) {
    return Error::refused(shown + "/" + e.rel + ": " + std::strerror(errno), errno);
  }
  return fd;
}

KeyBuilder::KeyBuilder(const std::string& canonical_path, stage::SourceKind kind, stage::Unpack unpack)
{
  m_hash.field_u64(k_key_version);
  m_hash.field(canonical_path);
  m_hash.field(stage::name_of(kind));
  m_hash.field(stage::name_of(unpack));
}

void KeyBuilder::add(const std::string& rel, const struct stat& st)
{
  m_hash.field(rel);
  m_hash.field_u64(st.st_mode);
  m_hash.field_u64(st.st_dev);
  m_hash.field_u64(st.st_ino);
  m_hash.field_u64(static_cast<std::uint64_t>(st.st_size));
  m_hash.field_u64(ns(st.st_mtim));
  m_hash.field_u64(ns(st.st_ctim));
  m_newest_ns = std::max({m_newest_ns, signed_ns(st.st_mtim), signed_ns(st.st_ctim)});
  if (S_ISREG(st.st_mode)) {
    ++m_files;
    m_bytes += static_cast<std::uint64_t>(st.st_size);
  }
}

std::string KeyBuilder::key() { return m_hash.hex_digest(); }

std::string delivered_key(const std::string& key, std::uint32_t uid)
{
  Sha256 h;
  const std::string text = "delivered to uid " + std::to_string(uid) + ": " + key;
  h.update(text.data(), text.size());
  return h.hex_digest();
}

Result<SourceIdentity> identify_file(int fd, const std::string& canonical_path, stage::Unpack unpack)
{
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Error::from_errno(canonical_path);
  }
  if (!S_ISREG(st.st_mode)) {
    return Error::refused(canonical_path + ": not a regular file or directory");
  }
  KeyBuilder k(canonical_path, stage::SourceKind::file, unpack);
  k.add("", st);
  return SourceIdentity{k.key(), k.files(), k.bytes(), k.newest_ns()};
}

Result<SourceIdentity> identify_tree(int dir_fd, const std::string& canonical_path, const std::string& shown)
{
  struct stat root {};
  if (::fstat(dir_fd, &root) != 0) {
    return Error::from_errno(shown);
  }
  KeyBuilder k(canonical_path, stage::SourceKind::dir, stage::Unpack::never);
  k.add("", root);
  auto st = fs::walk_tree(dir_fd, [&](const fs::WalkEntry& e) -> Result<fs::WalkControl> {
    if (!S_ISREG(e.st.st_mode) && !S_ISDIR(e.st.st_mode)) {
      k.add(e.rel, e.st); // symlinks (their target is read and checked when streamed), devices, FIFOs
      return fs::WalkControl::go_on;
    }
    // Not a check by name and a key from the walk's stat (a rename between the two would key one
    // inode and check another): the key is what the caller's own open holds.
    struct stat now {};
    auto fd = open_walked(e, shown, now);
    if (!fd) {
      return fd.error();
    }
    k.add(e.rel, now);
    return fs::WalkControl::go_on;
  });
  if (!st) {
    if (st.error().kind == ErrorKind::io && st.error().code == EACCES) {
      return Error::refused(shown + ": " + st.error().message, EACCES);
    }
    return st.error();
  }
  return SourceIdentity{k.key(), k.files(), k.bytes(), k.newest_ns()};
}

} // namespace stagehand::cache
