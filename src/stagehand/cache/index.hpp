// The node cache's entries in memory: what each holds and when it was last used, loaded from the
// manifests once at start and kept current by publish, touch and evict, so no request and no GC
// pass reads every manifest again. Pure data; the Store keeps it beside the directory it describes.
#pragma once

#include "stagehand/cache/entry_meta.hpp"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace stagehand::cache {

struct CacheTotals
{
  std::uint64_t entries = 0;
  std::uint64_t bytes = 0; // disk bytes
};

struct CacheLimits
{
  std::uint64_t max_bytes = 0;
  std::uint64_t max_entries = 0;
};

class Index
{
public:
  void put(const EntryMeta& meta); // adds or replaces
  void erase(const std::string& key);
  void touch(const std::string& key, std::int64_t now);
  std::optional<EntryMeta> find(const std::string& key) const;
  CacheTotals totals() const { return m_totals; }
  std::vector<EntryMeta> all() const; // by key
  std::vector<std::string> keys() const;

  // What to evict, least recently used first and never an entry `pinned` says a job uses, so that
  // the cache holds one more entry of `incoming_bytes` (Incoming::none: no new entry) within
  // `limits`. When evicting every unpinned entry is not enough, `fits` is false and `victims`
  // holds them all (GC evicts them; a publish evicts nothing and stays out of the cache).
  enum class Incoming { none, one };
  struct Room
  {
    std::vector<EntryMeta> victims;
    bool fits = false;
  };
  Room make_room(Incoming incoming, std::uint64_t incoming_bytes, const CacheLimits& limits,
                 const std::function<bool(const std::string&)>& pinned) const;

private:
  std::map<std::string, EntryMeta> m_by_key;
  std::set<std::pair<std::int64_t, std::string>> m_by_use; // (last_used, key)
  CacheTotals m_totals;
};

} // namespace stagehand::cache
