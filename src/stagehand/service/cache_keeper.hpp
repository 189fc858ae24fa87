// The node cache's keeping for stagehandd: the store in use (replaced on reload), the entries jobs
// are materialising (pinned), the tmp/ names in use (fills, entries set aside) and those waiting
// for their removal, and LRU eviction within [daemon] cache_max_bytes and cache_max_entries
// (cache/index chooses). Removing a big entry takes seconds: it is set aside under the lock and
// removed by remove_now() without it.
//
// Locking. The keeper's own mutex guards its members; every method takes it. Lock order: the
// node's mutex (Node::mutex) first, then the keeper's, then the registry's (its `in_use` predicate
// asks the registry), then the Store's index lock; the keeper never takes the node's but in evict().
// The *_locked methods are called with the node's mutex held: remove_later_locked wakes the GC
// thread (a cause set under the GC's own small lock, taken after this one and the node's), which
// then asks removals_waiting() without that lock. Root's
// evict() takes the node's mutex itself, only while it sets entries aside (as every other
// eviction happens under it), and lets it go between batches.
#pragma once

#include "stagehand/cache/index.hpp"
#include "stagehand/cache/store.hpp"

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace stagehand::service {

// A name under a store's tmp/: a fill or an entry set aside, waiting for its removal.
struct TmpName
{
  std::shared_ptr<cache::Store> store;
  std::string name;
};

// Whether a running job's directory holds an entry (the registry's answer).
using KeyInUse = std::function<bool(const std::string& key)>;

class CacheKeeper
{
public:
  // `removal_queued` wakes whoever calls take_removals() (the GC thread); called under the keeper's
  // lock. `jobs_use` says whether a running job's directory holds an entry (the registry's answer).
  // `jobs_use`: whether a running job uses an entry (LRU eviction leaves it); `jobs_view`: whether
  // one shows it as a cache view (root's `cache evict` leaves it: removing it empties the view).
  explicit CacheKeeper(std::function<void()> removal_queued = {}, KeyInUse jobs_use = {}, KeyInUse jobs_view = {});

  // The store in use, or null when the cache is off. Users keep their own reference for a request.
  std::shared_ptr<cache::Store> store() const;
  void use_store(std::shared_ptr<cache::Store> store);
  void set_limits(const cache::CacheLimits& limits);
  // The store in use's totals from its index (zero when the cache is off), and its entries by key.
  cache::CacheTotals totals() const;
  std::vector<cache::EntryMeta> list() const;
  // Entries evicted since start (by LRU eviction and by root).
  std::uint64_t evictions() const;

  // A job materialises `key` from `store`: its entry, pinned (never evicted) until unpin(), or an
  // io error with code ENOENT. Found and pinned at once: no eviction comes between.
  Result<cache::EntryMeta> pin_entry(const cache::Store& store, const std::string& key);
  void unpin(const std::string& key);
  bool pinned(const std::string& key) const;
  // Pinned, or in a running job's directory: what eviction never takes.
  bool in_use(const std::string& key) const;

  // Evicts least recently used entries of the store in use, none in use, until it is within the
  // limits (or nothing else is left). Best effort: what jobs use stays, even past them.
  void evict_to_fit_locked();
  // Makes room in `store` for one more entry of `disk_bytes` the same way; false (and nothing
  // evicted) when even evicting every entry no job uses would not: the fill stays out of the cache.
  // True at once when `store` is no longer the one in use (a reload moved the cache meanwhile).
  bool make_room_locked(const std::shared_ptr<cache::Store>& store, std::uint64_t disk_bytes);

  // A fill's directory under `store`'s tmp/, its name in use (no sweep takes it) until it is
  // published or removed.
  Result<cache::Fill> begin_fill(const std::shared_ptr<cache::Store>& store, const std::string& key, uid_t owner,
                                 gid_t group);
  // Publishes a sealed fill (Store::publish_sealed); on failure the fill stays, its name in use.
  Result<cache::EntryMeta> publish(cache::Store& store, cache::Fill& fill, const cache::EntryMeta& sealed);

  // A name under `store`'s tmp/ (a fill, an entry set aside), removed later by take_removals()'
  // caller; its name stays in use until then. The Fill overload leaves `fill` empty.
  void remove_later_locked(std::shared_ptr<cache::Store> store, std::string name);
  void remove_later_locked(const std::shared_ptr<cache::Store>& store, cache::Fill& fill);
  std::vector<TmpName> take_removals();
  bool removals_waiting() const;
  // Removes `names` (set aside as above), then frees them; called without the node's mutex.
  // Returns, for each name in order, nothing when it is gone or why not (logged too; GC's sweep retries it).
  std::vector<std::optional<std::string>> remove_now(const std::vector<TmpName>& names);

  // GC: a crash's leftovers in `scanned` (Store::set_aside_debris), each set aside under its tmp/
  // name in use, for remove_now(); nothing when a reload moved the cache since the scan.
  struct Debris
  {
    TmpName tmp;
    std::string shown; // as it was found: the store's path and "tmp/NAME" or "entries/NAME"
  };
  std::vector<Debris> set_aside_debris(const std::shared_ptr<cache::Store>& scanned, const cache::Store::Scan& scan);

  // Root's `cache evict`: the entries of the store in use that `chosen` picks, set aside (under
  // `daemon_mutex`) and removed (without it). One being materialised stays, said in `errors`.
  // The lock is held k_evict_hold at most at a time, then let go for a moment: a rename each on a
  // slow disk, a great many entries would otherwise hold it past the lock watch's patience, and
  // every job starting meanwhile would stage without the cache.
  struct RootEviction
  {
    bool cache_off = false;
    std::vector<std::string> evicted; // their sources
    std::vector<std::string> errors;
  };
  RootEviction evict(const std::function<bool(const cache::EntryMeta&)>& chosen, std::mutex& daemon_mutex);
  static constexpr std::chrono::milliseconds k_evict_hold{100};

private:
  void evict_victims(const std::shared_ptr<cache::Store>& store, const std::vector<cache::EntryMeta>& victims);
  void queue_removal(std::shared_ptr<cache::Store> store, std::string name);
  // in_use() for the Store's eviction, called with m_mutex held.
  KeyInUse in_use_locked() const;

  const std::function<void()> m_removal_queued;
  const KeyInUse m_jobs_use;
  const KeyInUse m_jobs_view;
  mutable std::mutex m_mutex; // guards everything below
  std::shared_ptr<cache::Store> m_store;
  cache::CacheLimits m_limits;
  std::set<std::string> m_fill_dirs;   // tmp/ names in use
  std::vector<TmpName> m_removals;     // for take_removals()
  std::map<std::string, int> m_pins;   // keys being materialised
  std::uint64_t m_evictions = 0;
};

} // namespace stagehand::service
