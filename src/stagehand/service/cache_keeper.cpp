// The node cache's keeping: pins, tmp/ names in use, removals set aside, LRU eviction (cache_keeper.hpp).
#include "stagehand/service/cache_keeper.hpp"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <thread>
#include <utility>

namespace stagehand::service {

CacheKeeper::CacheKeeper(std::function<void()> removal_queued, KeyInUse jobs_use, KeyInUse jobs_view)
  : m_removal_queued(std::move(removal_queued)), m_jobs_use(std::move(jobs_use)), m_jobs_view(std::move(jobs_view))
{
}

std::shared_ptr<cache::Store> CacheKeeper::store() const
{
  std::lock_guard lock(m_mutex);
  return m_store;
}

void CacheKeeper::use_store(std::shared_ptr<cache::Store> store)
{
  std::lock_guard lock(m_mutex);
  m_store = std::move(store);
}

void CacheKeeper::set_limits(const cache::CacheLimits& limits)
{
  std::lock_guard lock(m_mutex);
  m_limits = limits;
}

cache::CacheTotals CacheKeeper::totals() const
{
  auto s = store();
  return s ? s->totals() : cache::CacheTotals{}; // from the index: no manifest is read
}

std::vector<cache::EntryMeta> CacheKeeper::list() const
{
  auto s = store();
  return s ? s->list() : std::vector<cache::EntryMeta>{};
}

std::uint64_t CacheKeeper::evictions() const
{
  std::lock_guard lock(m_mutex);
  return m_evictions;
}

Result<cache::EntryMeta> CacheKeeper::pin_entry(const cache::Store& store, const std::string& key)
{
  std::lock_guard lock(m_mutex);
  auto meta = store.lookup(key);
  if (meta) {
    ++m_pins[key];
  }
  return meta;
}

void CacheKeeper::unpin(const std::string& key)
{
  std::lock_guard lock(m_mutex);
  if (auto it = m_pins.find(key); it != m_pins.end() && --it->second <= 0) {
    m_pins.erase(it);
  }
}

bool CacheKeeper::pinned(const std::string& key) const
{
  std::lock_guard lock(m_mutex);
  return m_pins.count(key) > 0;
}

bool CacheKeeper::in_use(const std::string& key) const
{
  std::lock_guard lock(m_mutex);
  return in_use_locked()(key);
}

KeyInUse CacheKeeper::in_use_locked() const
{
  return [this](const std::string& key) { return m_pins.count(key) > 0 || (m_jobs_use && m_jobs_use(key)); };
}

void CacheKeeper::evict_to_fit_locked()
{
  std::lock_guard lock(m_mutex);
  if (!m_store) {
    return;
  }
  evict_victims(m_store, m_store->make_room(cache::Index::Incoming::none, 0, m_limits, in_use_locked()).victims);
}

bool CacheKeeper::make_room_locked(const std::shared_ptr<cache::Store>& store, std::uint64_t disk_bytes)
{
  std::lock_guard lock(m_mutex);
  if (!store || store != m_store) {
    return true; // the entry goes to the cache a reload left
  }
  auto room = store->make_room(cache::Index::Incoming::one, disk_bytes, m_limits, in_use_locked());
  if (!room.fits) {
    return false; // evicting what no job uses would not make room: evict nothing
  }
  evict_victims(store, room.victims);
  return true;
}

void CacheKeeper::evict_victims(const std::shared_ptr<cache::Store>& store, const std::vector<cache::EntryMeta>& victims)
{
  for (const auto& e : victims) {
    if (auto aside = store->set_aside(e.key)) {
      queue_removal(store, std::move(*aside));
      ++m_evictions;
      spdlog::info("cache: evicted {} ({} bytes, least recently used)", e.source, e.disk_bytes);
    }
  }
}

Result<cache::Fill> CacheKeeper::begin_fill(const std::shared_ptr<cache::Store>& store, const std::string& key,
                                            uid_t owner, gid_t group)
{
  std::lock_guard lock(m_mutex);
  auto begun = store->begin_fill(key, owner, group);
  if (begun) {
    m_fill_dirs.insert(begun->name);
  }
  return begun;
}

Result<cache::EntryMeta> CacheKeeper::publish(cache::Store& store, cache::Fill& fill, const cache::EntryMeta& sealed)
{
  std::lock_guard lock(m_mutex);
  const std::string name = fill.name;
  auto published = store.publish_sealed(fill, sealed);
  if (published) {
    m_fill_dirs.erase(name); // published, the name is gone from tmp/
  }
  return published;
}

void CacheKeeper::queue_removal(std::shared_ptr<cache::Store> store, std::string name)
{
  m_fill_dirs.insert(name);
  m_removals.push_back(TmpName{std::move(store), std::move(name)});
  if (m_removal_queued) {
    m_removal_queued();
  }
}

void CacheKeeper::remove_later_locked(std::shared_ptr<cache::Store> store, std::string name)
{
  std::lock_guard lock(m_mutex);
  queue_removal(std::move(store), std::move(name));
}

void CacheKeeper::remove_later_locked(const std::shared_ptr<cache::Store>& store, cache::Fill& fill)
{
  remove_later_locked(store, std::exchange(fill.name, {}));
  fill.dir.reset();
}

std::vector<TmpName> CacheKeeper::take_removals()
{
  std::lock_guard lock(m_mutex);
  return std::exchange(m_removals, {});
}

bool CacheKeeper::removals_waiting() const
{
  std::lock_guard lock(m_mutex);
  return !m_removals.empty();
}

std::vector<std::optional<std::string>> CacheKeeper::remove_now(const std::vector<TmpName>& names)
{
  std::vector<std::optional<std::string>> failed(names.size());
  if (names.empty()) {
    return failed;
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto& [store, name] = names[i];
    if (auto st = store->remove_from_tmp(name); !st) {
      spdlog::warn("cache: {}/tmp/{}: {} (GC's sweep retries)", store->path(), name, st.error().message);
      failed[i] = store->path() + "/tmp/" + name + ": " + st.error().message;
    }
  }
  std::lock_guard lock(m_mutex);
  for (const auto& [store, name] : names) {
    m_fill_dirs.erase(name);
  }
  return failed;
}

std::vector<CacheKeeper::Debris> CacheKeeper::set_aside_debris(const std::shared_ptr<cache::Store>& scanned,
                                                              const cache::Store::Scan& scan)
{
  std::lock_guard lock(m_mutex);
  std::vector<Debris> out;
  if (!m_store || m_store != scanned) { // not when a reload moved the cache since the scan
    return out;
  }
  for (auto& d : m_store->set_aside_debris(m_fill_dirs, scan)) {
    m_fill_dirs.insert(d.tmp_name); // as for any removal in flight: the next sweep leaves it alone
    out.push_back(Debris{TmpName{m_store, std::move(d.tmp_name)}, m_store->path() + "/" + d.shown});
  }
  return out;
}

CacheKeeper::RootEviction CacheKeeper::evict(const std::function<bool(const cache::EntryMeta&)>& chosen,
                                             std::mutex& daemon_mutex)
{
  RootEviction out;
  std::vector<TmpName> evicted; // removed below, without the locks; the answer comes once they are
  std::shared_ptr<cache::Store> store = this->store();
  std::vector<cache::EntryMeta> entries = store ? store->list() : std::vector<cache::EntryMeta>{};
  std::unique_lock daemon(daemon_mutex);
  std::unique_lock lock(m_mutex);
  while (m_store != store) { // listed without the locks; again if a reload moved the cache meanwhile
    store = m_store;
    lock.unlock();
    daemon.unlock();
    entries = store ? store->list() : std::vector<cache::EntryMeta>{};
    daemon.lock();
    lock.lock();
  }
  if (!store) {
    out.cache_off = true;
    return out;
  }
  auto held_since = std::chrono::steady_clock::now();
  for (const auto& e : entries) { // an entry evicted since it was listed is skipped
    if (std::chrono::steady_clock::now() - held_since >= k_evict_hold) {
      // Others' turn (a job's request, the lock watch's probe): glibc's mutex is not fair, so
      // a moment without it, not an unlock and at once a lock again.
      lock.unlock();
      daemon.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      daemon.lock();
      lock.lock();
      held_since = std::chrono::steady_clock::now();
      if (m_store != store) {
        out.errors.push_back("the node cache moved (a reload) during the eviction: the rest is not evicted");
        break;
      }
    }
    if (!chosen(e)) {
      continue;
    }
    if (m_pins.count(e.key)) {
      out.errors.push_back(e.source + ": being staged right now, not evicted");
      continue;
    }
    if (m_jobs_view && m_jobs_view(e.key)) { // a view shows the entry's own files (links outlive it)
      out.errors.push_back(e.source + ": shown as a cache view in a running job on this node, not evicted (evict it "
                                      "again once the job has ended)");
      continue;
    }
    if (auto aside = store->set_aside(e.key); !aside) {
      if (aside.error().code != ENOENT) { // ENOENT: evicted since it was listed
        out.errors.push_back(aside.error().message);
      }
    } else {
      m_fill_dirs.insert(*aside);
      evicted.push_back(TmpName{store, std::move(*aside)});
      ++m_evictions;
      out.evicted.push_back(e.source);
    }
  }
  lock.unlock();
  daemon.unlock();
  for (auto& failed : remove_now(evicted)) {
    if (failed) {
      out.errors.push_back(std::move(*failed));
    }
  }
  return out;
}

} // namespace stagehand::service
