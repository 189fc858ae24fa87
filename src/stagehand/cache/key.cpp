// Source identity hashing.
#include "stagehand/cache/key.hpp"

#include "stagehand/fs/walk.hpp"

#include <fcntl.h>
#include <cstring>
#include <unistd.h>

namespace stagehand::cache {

namespace {

constexpr std::uint64_t k_key_version = 1;

std::uint64_t ns(const struct timespec& t)
{
  return static_cast<std::uint64_t>(t.tv_sec) * 1000000000ULL + static_cast<std::uint64_t>(t.tv_nsec);
}

} // namespace

KeyBuilder::KeyBuilder(const std::string& canonical_path, SourceShape shape, UnpackMode unpack)
{
  m_hash.field_u64(k_key_version);
  m_hash.field(canonical_path);
  m_hash.field(shape == SourceShape::dir ? "dir" : "file");
  m_hash.field(unpack == UnpackMode::never ? "never" : "auto");
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
  if (S_ISREG(st.st_mode)) {
    ++m_files;
    m_bytes += static_cast<std::uint64_t>(st.st_size);
  }
}

std::string KeyBuilder::key() { return m_hash.hex_digest(); }

Result<SourceIdentity> identify_file(int fd, const std::string& canonical_path, UnpackMode unpack)
{
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Error::from_errno(canonical_path);
  }
  if (!S_ISREG(st.st_mode)) {
    return Error::refused(canonical_path + ": not a regular file or directory");
  }
  KeyBuilder k(canonical_path, SourceShape::file, unpack);
  k.add("", st);
  return SourceIdentity{k.key(), k.files(), k.bytes()};
}

Result<SourceIdentity> identify_tree(int dir_fd, const std::string& canonical_path, const std::string& shown)
{
  struct stat root {};
  if (::fstat(dir_fd, &root) != 0) {
    return Error::from_errno(shown);
  }
  KeyBuilder k(canonical_path, SourceShape::dir, UnpackMode::never);
  k.add("", root);
  auto st = fs::walk_tree(dir_fd, [&](const fs::WalkEntry& e) -> Result<fs::WalkControl> {
    k.add(e.rel, e.st);
    if (S_ISREG(e.st.st_mode) && ::faccessat(e.parent_fd, e.name.c_str(), R_OK, AT_EACCESS) != 0) {
      return Error::refused(shown + "/" + e.rel + ": " + std::strerror(errno), errno);
    }
    if (S_ISDIR(e.st.st_mode) && ::faccessat(e.parent_fd, e.name.c_str(), R_OK | X_OK, AT_EACCESS) != 0) {
      return Error::refused(shown + "/" + e.rel + ": " + std::strerror(errno), errno);
    }
    return fs::WalkControl::go_on;
  });
  if (!st) {
    if (st.error().kind == ErrorKind::io && st.error().code == EACCES) {
      return Error::refused(shown + ": " + st.error().message, EACCES);
    }
    return st.error();
  }
  return SourceIdentity{k.key(), k.files(), k.bytes()};
}

} // namespace stagehand::cache
