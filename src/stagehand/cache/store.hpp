// The node cache on disk. Layout under [daemon] cache_dir (root-owned, 0700, never readable by job
// users): entries/<key>/ holds a published entry (manifest.json, root's, and data, the service
// user's read-only files); tmp/ holds fills in progress and entries being evicted. A fill is
// published by one rename, so a kill -9 leaves only tmp/ debris, which sweep() removes at start.
#pragma once

#include "stagehand/util/fd.hpp"
#include "stagehand/util/result.hpp"

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace stagehand::cache {

struct EntryMeta
{
  std::string key;
  std::string source;      // canonical path it was filled from
  std::string shape;       // "file" | "dir"
  std::string how;         // "copied" | "unpacked"
  std::uint64_t files = 0; // regular files (hard links counted once per name)
  std::uint64_t bytes = 0; // file data
  std::uint64_t disk_bytes = 0; // what the entry occupies (st_blocks of everything in it)
  std::int64_t created = 0;
  std::int64_t last_used = 0;   // the manifest's mtime
};

inline constexpr const char* k_data_name = "data";

struct Fill
{
  std::string name; // under tmp/
  UniqueFd dir;     // tmp/<name>, owned by the service user, 0700; the data goes in "data" inside
};

class Store
{
public:
  // Opens (creating) the cache directory: it must resolve through root-owned directories only.
  static Result<Store> open(const std::string& path);

  const std::string& path() const { return m_path; }

  // The published entry, or an io error with code ENOENT.
  Result<EntryMeta> lookup(const std::string& key) const;
  // An fd of entries/<key> (for materialising its "data").
  Result<UniqueFd> open_entry(const std::string& key) const;

  Result<Fill> begin_fill(const std::string& key, uid_t owner, gid_t group);
  // Measures the fill, writes its manifest, syncs the filesystem and renames it into entries/.
  // EEXIST (another fill of the same key won) leaves the fill in place for discard().
  // meta.disk_bytes: the data's disk usage when the caller measured it already (0: measured here).
  Result<EntryMeta> publish(Fill& fill, EntryMeta meta);
  // The same in two steps: seal() does the slow part (measure, manifest, sync: no lock needed, the
  // fill is the caller's alone), publish_sealed() the rename (under the caller's lock).
  Result<EntryMeta> seal(Fill& fill, EntryMeta meta);
  Result<EntryMeta> publish_sealed(Fill& fill, const EntryMeta& sealed);
  void discard(Fill& fill);

  Status touch(const std::string& key, std::int64_t now);
  // Moves the entry out of entries/ (atomically: no job finds it from then on) and removes it.
  Status evict(const std::string& key);
  // The same in two steps, for a caller holding a lock: the move, which returns the entry's name
  // under tmp/, then its removal (seconds for a big entry), called once the lock is released.
  Result<std::string> set_aside(const std::string& key);
  Status remove_from_tmp(const std::string& name);
  std::vector<EntryMeta> list() const;

  // Removes what tmp/ holds except the named active fills, and entries without a manifest.
  // Returns the names removed.
  std::vector<std::string> sweep(const std::set<std::string>& active_fills);
  // The same in two steps, for a caller holding a lock: what sweep() would remove, each under its
  // name in tmp/ (a broken entry is moved there first, by one rename), for remove_from_tmp() once
  // the lock is released. `shown`: "tmp/NAME" or "entries/NAME", as it was found.
  struct Debris
  {
    std::string shown;
    std::string tmp_name;
  };
  std::vector<Debris> set_aside_debris(const std::set<std::string>& active_fills);

private:
  std::string m_path;
  UniqueFd m_root;
  UniqueFd m_entries;
  UniqueFd m_tmp;
};

// What a tree (or file) below `dir_fd`/`name` occupies on disk, in bytes.
std::uint64_t disk_usage(int dir_fd, const std::string& name);

} // namespace stagehand::cache
