// The node cache on disk. Layout under [daemon] cache_dir (root-owned, 0700, never readable by job
// users): entries/<key>/ holds a published entry (manifest.json and data, root's read-only files:
// the service user filled them, root took them over before publishing); tmp/ holds fills in
// progress and entries being evicted. A fill is published by one rename, so a kill -9 leaves only
// tmp/ debris, which sweep() removes at start. The entries are also kept in memory (index.hpp),
// read from their manifests once at open() and kept current by publish, touch and evict.
#pragma once

#include "stagehand/cache/entry_meta.hpp"
#include "stagehand/cache/index.hpp"
#include "stagehand/util/fd.hpp"
#include "stagehand/util/result.hpp"

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace stagehand::cache {

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
  // Reads every entry's manifest once, into the index.
  static Result<Store> open(const std::string& path);

  const std::string& path() const { return m_path; }

  // The published entry (its manifest read from the disk; the index follows what it finds), or an
  // io error with code ENOENT.
  Result<EntryMeta> lookup(const std::string& key) const;
  // An fd of entries/<key> (for materialising its "data").
  Result<UniqueFd> open_entry(const std::string& key) const;

  Result<Fill> begin_fill(const std::string& key, uid_t owner, gid_t group);
  // Takes the fill over (root:root, no write bit: the service user can no longer change what jobs
  // will get), measures it in the same walk (meta.disk_bytes), writes its manifest, syncs the
  // filesystem and renames it into entries/.
  // EEXIST (another fill of the same key won) leaves the fill in place for discard().
  Result<EntryMeta> publish(Fill& fill, EntryMeta meta);
  // The same in steps: seal() does the slow part (take over, measure, manifest, sync: no lock
  // needed, the fill is the caller's alone), publish_sealed() the rename (under the caller's lock),
  // sync_published() makes the renames so far durable (an fsync of entries/, which may wait for a
  // journal commit on a busy disk: after the caller's lock). An entry lost to a crash before that
  // is only a miss: its data was synced before the rename.
  Result<EntryMeta> seal(Fill& fill, EntryMeta meta);
  Result<EntryMeta> publish_sealed(Fill& fill, const EntryMeta& sealed);
  void sync_published() const;
  void discard(Fill& fill);

  Status touch(const std::string& key, std::int64_t now);
  // Moves the entry out of entries/ (atomically: no job finds it from then on) and removes it.
  Status evict(const std::string& key);
  // The same in two steps, for a caller holding a lock: the move, which returns the entry's name
  // under tmp/, then its removal (seconds for a big entry), called once the lock is released.
  Result<std::string> set_aside(const std::string& key);
  Status remove_from_tmp(const std::string& name);
  // The published entries, from the index (no manifest is read), by key.
  std::vector<EntryMeta> list() const;
  CacheTotals totals() const;
  // Index::make_room over the entries as they are now.
  Index::Room make_room(Index::Incoming incoming, std::uint64_t incoming_bytes, const CacheLimits& limits,
                        const std::function<bool(const std::string&)>& pinned) const;

  // Removes what tmp/ holds except the named active fills, and entries without a manifest.
  // Returns the names removed.
  std::vector<std::string> sweep(const std::set<std::string>& active_fills);
  // The same in three steps, for a caller with a lock: scan() lists both directories and compares
  // entries/ with the index (no lock needed, however many entries there are); set_aside_debris(),
  // under the lock, re-checks each difference by name (publishing and evicting went on meanwhile),
  // brings the index in line and returns what sweep() would remove, each under its name in tmp/ (a
  // broken entry is moved there first, by one rename), for remove_from_tmp() once the lock is
  // released. `shown`: "tmp/NAME" or "entries/NAME", as it was found.
  struct Scan
  {
    std::vector<std::string> tmp;
    std::vector<std::string> unknown; // in entries/, not in the index (or not a key at all)
    std::vector<std::string> gone;    // in the index, not in entries/
  };
  Scan scan() const;
  struct Debris
  {
    std::string shown;
    std::string tmp_name;
  };
  std::vector<Debris> set_aside_debris(const std::set<std::string>& active_fills, const Scan& scan);

private:
  // The index's own lock: the Store is used with and without the daemon's, from many threads.
  struct Indexed
  {
    std::mutex mutex;
    Index index;
  };
  std::vector<EntryMeta> read_manifests() const;

  std::string m_path;
  UniqueFd m_root;
  UniqueFd m_entries;
  UniqueFd m_tmp;
  std::unique_ptr<Indexed> m_indexed = std::make_unique<Indexed>();
};

// Gives everything below `dir_fd` (and `dir_fd` itself) to root:root without write bits, set-id
// bits or any way back for the user who made it, and says what the tree occupies on disk (each
// inode once). Each directory is opened (O_NOFOLLOW, not crossing mounts) and changed through its
// fd before anything in it; what it holds is then changed by name, in a parent that is root's
// already (a symlink never followed). Refused when a name below is not owned by the owner of
// `dir_fd` (the fill's user, who made everything in it): something linked or moved in from
// outside, which its owner may hold open for writing. The one walk a fill's seal makes.
Result<std::uint64_t> take_over(int dir_fd, const std::string& shown);

// What a tree (or file) below `dir_fd`/`name` occupies on disk, in bytes.
std::uint64_t disk_usage(int dir_fd, const std::string& name);

} // namespace stagehand::cache
