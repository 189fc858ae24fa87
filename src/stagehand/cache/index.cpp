// The cache's in-memory index and its eviction choice.
#include "stagehand/cache/index.hpp"

namespace stagehand::cache {

void Index::put(const EntryMeta& meta)
{
  erase(meta.key);
  m_by_key.emplace(meta.key, meta);
  m_by_use.emplace(meta.last_used, meta.key);
  ++m_totals.entries;
  m_totals.bytes += meta.disk_bytes;
}

void Index::erase(const std::string& key)
{
  auto it = m_by_key.find(key);
  if (it == m_by_key.end()) {
    return;
  }
  m_by_use.erase({it->second.last_used, key});
  --m_totals.entries;
  m_totals.bytes -= std::min(m_totals.bytes, it->second.disk_bytes);
  m_by_key.erase(it);
}

void Index::touch(const std::string& key, std::int64_t now)
{
  auto it = m_by_key.find(key);
  if (it == m_by_key.end()) {
    return;
  }
  m_by_use.erase({it->second.last_used, key});
  it->second.last_used = now;
  m_by_use.emplace(now, key);
}

std::optional<EntryMeta> Index::find(const std::string& key) const
{
  auto it = m_by_key.find(key);
  if (it == m_by_key.end()) {
    return std::nullopt;
  }
  return it->second;
}

std::vector<EntryMeta> Index::all() const
{
  std::vector<EntryMeta> out;
  out.reserve(m_by_key.size());
  for (const auto& kv : m_by_key) {
    out.push_back(kv.second);
  }
  return out;
}

std::vector<std::string> Index::keys() const
{
  std::vector<std::string> out;
  out.reserve(m_by_key.size());
  for (const auto& kv : m_by_key) {
    out.push_back(kv.first);
  }
  return out;
}

Index::Room Index::make_room(Incoming incoming, std::uint64_t incoming_bytes, const CacheLimits& limits,
                             const std::function<bool(const std::string&)>& pinned) const
{
  const std::uint64_t new_entries = incoming == Incoming::one ? 1 : 0;
  Room room;
  if (incoming_bytes > limits.max_bytes || new_entries > limits.max_entries) {
    return room; // never fits: nothing is evicted for it
  }
  // What must stay below the limits once the newcomer is in.
  const std::uint64_t byte_budget = limits.max_bytes - incoming_bytes;
  const std::uint64_t entry_budget = limits.max_entries - new_entries;
  std::uint64_t bytes = m_totals.bytes;
  std::uint64_t entries = m_totals.entries;
  // Oldest first; stops as soon as it fits, so a cache within its limits costs nothing here.
  for (auto it = m_by_use.begin(); it != m_by_use.end() && (bytes > byte_budget || entries > entry_budget); ++it) {
    if (pinned(it->second)) {
      continue; // an entry a running job uses is never evicted
    }
    const EntryMeta& e = m_by_key.at(it->second);
    room.victims.push_back(e);
    bytes -= std::min(bytes, e.disk_bytes);
    --entries;
  }
  room.fits = bytes <= byte_budget && entries <= entry_budget;
  return room;
}

} // namespace stagehand::cache
