// Cache keys: the identity of a source as the user sees it now. Device, inode, size, mode and
// mtime and ctime in nanoseconds of the file, or of every entry of a directory walk: any change
// (a same-size edit with the mtime put back changes ctime; a rename-replace changes the inode)
// gives another key. SHA-256, so that no user can make their source collide with another's.
#pragma once

#include "stagehand/stage/kinds.hpp"
#include "stagehand/util/result.hpp"
#include "stagehand/util/sha256.hpp"

#include "stagehand/util/fd.hpp"

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <ctime>
#include <functional>
#include <string>

namespace stagehand::fs {
struct WalkEntry;
} // namespace stagehand::fs

namespace stagehand::cache {

class KeyBuilder
{
public:
  KeyBuilder(const std::string& canonical_path, stage::SourceKind kind, stage::Unpack unpack);
  // Adds one entry ("" for the source itself) with its lstat.
  void add(const std::string& rel, const struct stat& st);
  std::string key(); // 64 hex digits

  std::uint64_t files() const { return m_files; }
  std::uint64_t bytes() const { return m_bytes; }
  std::int64_t newest_ns() const { return m_newest_ns; }

private:
  Sha256 m_hash;
  std::uint64_t m_files = 0;
  std::uint64_t m_bytes = 0;
  std::int64_t m_newest_ns = 0;
};

struct SourceIdentity
{
  std::string key;
  std::uint64_t files = 0;      // regular files
  std::uint64_t bytes = 0;      // their sizes
  std::int64_t newest_ns = 0;   // the latest mtime or ctime of any entry (ns since the epoch)
};

// The key of an entry filled from a copy of the source that passed through user `uid`'s hands (a
// read-once broadcast's delivery in the job's directory): the same identity, scoped to that user.
// The bytes are the user's word for the source's, so such an entry serves only that user's jobs;
// entries the daemon read from the source itself (the plain key) serve everyone.
std::string delivered_key(const std::string& key, std::uint32_t uid);

// The racy-source rule (git's racy index): identity is metadata, so a file rewritten within one
// timestamp tick of the stat that keyed it (same size, same mtime and ctime) keeps its key with other
// bytes. A fill is published only when every entry's mtime and ctime are older than the window
// before `started` (a time read before the stats that made the key were taken); any later write
// then moves a ctime past them, and the stat after the read shows it. Coarse (1 s, NFS, Lustre)
// timestamps and a little clock skew fit in the window.
inline constexpr std::chrono::seconds k_racy_window{2};
bool changed_near(const SourceIdentity& id, const struct timespec& started);

// As the user (in the user-side child): the identity of the regular file open at `fd`.
Result<SourceIdentity> identify_file(int fd, const std::string& canonical_path, stage::Unpack unpack);

// As the user: the identity of the directory open at `dir_fd`, walking it with bounded fds. The
// caller's own open of each regular file and directory is the permission check, and the key is made
// from the open entry (fstat), which must be the inode the walk listed: an entry renamed in between
// is refused ("SHOWN/rel: changed while staging"), as is one the caller cannot open
// ("SHOWN/rel: Permission denied"). One open, fstat and close per entry.
Result<SourceIdentity> identify_tree(int dir_fd, const std::string& canonical_path, const std::string& shown);

// The same check for one walked entry (a regular file or a directory): opened as the caller,
// without following a symlink or entering a mount, its fstat into `now`; refused unless it is the
// inode the walk listed. Regular files are opened for reading (O_NONBLOCK: a FIFO swapped in never
// blocks), directories O_DIRECTORY (and must be searchable).
Result<UniqueFd> open_walked(const fs::WalkEntry& e, const std::string& shown, struct stat& now);

// Test seam: runs in open_walked between the walk's lstat of an entry and the open (the window a
// rename race aims at). Reset with `walked_entry_hook() = {}`.
std::function<void(const fs::WalkEntry&)>& walked_entry_hook();

} // namespace stagehand::cache
