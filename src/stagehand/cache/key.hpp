// Cache keys: the identity of a source as the user sees it now. Device, inode, size, mode and
// mtime and ctime in nanoseconds of the file, or of every entry of a directory walk: any change
// (a same-size edit with the mtime put back changes ctime; a rename-replace changes the inode)
// gives another key. SHA-256, so that no user can make their source collide with another's.
#pragma once

#include "stagehand/util/result.hpp"
#include "stagehand/util/sha256.hpp"

#include <sys/stat.h>

#include <cstdint>
#include <string>

namespace stagehand::cache {

enum class SourceShape { file, dir };
enum class UnpackMode { if_archive, never };

class KeyBuilder
{
public:
  KeyBuilder(const std::string& canonical_path, SourceShape shape, UnpackMode unpack);
  // Adds one entry ("" for the source itself) with its lstat.
  void add(const std::string& rel, const struct stat& st);
  std::string key(); // 64 hex digits

  std::uint64_t files() const { return m_files; }
  std::uint64_t bytes() const { return m_bytes; }

private:
  Sha256 m_hash;
  std::uint64_t m_files = 0;
  std::uint64_t m_bytes = 0;
};

struct SourceIdentity
{
  std::string key;
  std::uint64_t files = 0; // regular files
  std::uint64_t bytes = 0; // their sizes
};

// As the user (in the user-side child): the identity of the regular file open at `fd`.
Result<SourceIdentity> identify_file(int fd, const std::string& canonical_path, UnpackMode unpack);

// As the user: the identity of the directory open at `dir_fd`, walking it with bounded fds; every
// regular file must be readable and every directory listable by the caller, or it is refused
// naming the entry ("SHOWN/rel: Permission denied").
Result<SourceIdentity> identify_tree(int dir_fd, const std::string& canonical_path, const std::string& shown);

} // namespace stagehand::cache
