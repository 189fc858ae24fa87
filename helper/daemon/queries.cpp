// stagehandd: the status and cache requests (status, cache ls, cache evict) and LRU eviction.
#include "daemon.hpp"

#include "stagehand/service/metrics.hpp"

#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/gc/collect.hpp"
#include "stagehand/stage/progress.hpp"
#include "stagehand/stageout/kept.hpp"
#include "stagehand/tmpdir/job_dir.hpp"
#include "stagehand/tmpdir/lifecycle.hpp"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <map>
#include <utility>

namespace stagehand::daemon {

namespace {

std::string user_name(uid_t uid)
{
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buf[4096];
  if (::getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found) {
    return pw.pw_name;
  }
  return std::to_string(uid);
}

// Each job's user name in place of its uid.
void name_users(std::vector<proto::JobInfo>& jobs)
{
  std::map<std::uint32_t, std::string> names;
  for (auto& j : jobs) {
    auto [name, fresh] = names.try_emplace(j.uid);
    if (fresh) {
      name->second = user_name(j.uid);
    }
    j.user = name->second;
  }
}

// The progress records of the running jobs in `reply` into its stagings.
void add_job_progress(int base_fd, proto::StatusReply& reply)
{
  for (const auto& j : reply.jobs) { // the peer's own jobs only, as listed
    if (j.state != "running") {
      continue;
    }
    if (auto dir = fs::open_beneath(base_fd, tmpdir::job_dir_name(j.job_id), O_RDONLY | O_DIRECTORY)) {
      if (auto p = stage::read_progress_record(dir->get())) {
        reply.stagings.push_back(*p);
      }
    }
  }
}

} // namespace

void Daemon::on_status(const Peer& peer, Responder& out)
{
  proto::StatusReply reply;
  reply.node = m_node;
  auto base = open_base();
  std::optional<gc::Snapshot> snap;
  if (base) {
    if (auto s = gc::snapshot_base(base->get(), now_s())) {
      snap = std::move(*s);
    }
  }
  const auto live = gc::live_step_jobs();
  const auto kept = base ? stageout::load_kept(base->get()) : std::vector<stageout::KeptResults>{};
  const std::string& base_path = m_base_path;
  std::unique_lock lock(m_mutex);
  status_jobs_locked(snap, live, peer, reply);
  for (const auto& k : kept) {
    if (peer.root() || k.uid == peer.uid) {
      reply.jobs.push_back(proto::JobInfo{k.job_id, "", k.uid, base_path + "/" + k.dir, stageout::kept_state(k)});
    }
  }
  if (m_store) { // from the index: no manifest is read
    const auto totals = m_store->totals();
    reply.cache.entries = totals.entries;
    reply.cache.bytes = totals.bytes;
  }
  reply.cache.max_bytes = m_config.daemon.cache_max_bytes;
  reply.cache.hits = m_counters.hits;
  reply.cache.misses = m_counters.misses;
  reply.cache.evictions = m_counters.evictions;
  reply.cache.fills_dropped = m_counters.fills_dropped;
  for (const auto& [id, staging] : m_stagings) {
    if (peer.root() || staging.uid == peer.uid) { // a user sees only their own
      reply.stagings.push_back(staging.progress);
    }
  }
  lock.unlock();
  // User names after the daemon's lock: a name service that answers slowly (LDAP, SSSD) holds up
  // this reply only, never a job's prolog, epilog or staging.
  name_users(reply.jobs);
  // Stagings that run in the job without the daemon (no cache, or it could not) keep a record in
  // the job's directory: read as root with the care root takes with what a user wrote.
  if (base) {
    add_job_progress(base->get(), reply);
  }
  out.result(reply);
}

void Daemon::status_jobs_locked(const std::optional<gc::Snapshot>& snap, const std::set<std::uint32_t>& live,
                                const Peer& peer, proto::StatusReply& reply)
{
  const std::string& base_path = m_base_path;
  std::set<std::uint32_t> listed;
  auto add = [&](std::uint32_t job, uid_t uid, const std::string& state) {
    if (!peer.root() && uid != peer.uid) {
      return; // a user sees only their own jobs
    }
    if (!listed.insert(job).second) {
      return;
    }
    reply.jobs.push_back(proto::JobInfo{job, "", uid, base_path + "/" + tmpdir::job_dir_name(job), state});
  };
  if (snap) {
    for (const auto& e : snap->entries) {
      auto job = gc::job_of_dir(e.name);
      if (!job || !e.is_dir) {
        if (std::string_view(e.name).starts_with(".trash.")) {
          ++reply.trash_entries;
        }
        continue;
      }
      const auto rec = m_registry.find(*job);
      const bool running = live.count(*job) > 0 || (rec && rec->state == registry::JobState::running);
      auto marker = snap->markers.find(*job);
      const bool kept = marker != snap->markers.end() && marker->second.until > snap->now &&
                        (marker->second.ino == 0 || marker->second.ino == e.ino);
      add(*job, e.uid, running ? "running" : kept ? "kept" : "orphan");
    }
  }
  if (m_stage_out) {
    for (const auto& p : m_stage_out->pending()) {
      if (!peer.root() && p.uid != peer.uid) {
        continue;
      }
      listed.insert(p.job_id);
      reply.jobs.push_back(proto::JobInfo{p.job_id, "", p.uid, base_path + "/" + p.dir,
                                          "stage-out pending (attempt " + std::to_string(p.attempts) + ")"});
    }
  }
}

void Daemon::on_cache_list(const Peer& peer, Responder& out)
{
  proto::CacheListReply reply;
  std::shared_ptr<cache::Store> store;
  {
    std::lock_guard lock(m_mutex);
    store = m_store;
  }
  if (!store) {
    out.result(reply);
    return;
  }
  // Copied from the index without the daemon's lock; what the jobs use is asked under it after.
  auto entries = store->list();
  std::lock_guard lock(m_mutex);
  std::set<std::string> mine; // keys the peer's jobs used
  m_registry.read([&](const registry::Registry& reg) {
    for (const auto& [id, job] : reg.jobs()) {
      if (job.uid == peer.uid) {
        mine.insert(job.cache_keys.begin(), job.cache_keys.end());
      }
    }
  });
  for (const auto& e : entries) {
    if (!peer.root() && !mine.count(e.key)) {
      continue;
    }
    reply.entries.push_back(proto::CacheEntryInfo{e.source, e.disk_bytes, e.files, e.last_used,
                                                  m_registry.key_in_use(e.key) || m_pins.count(e.key) > 0});
  }
  out.result(reply);
}

void Daemon::on_cache_evict(const proto::CacheEvict& r, const Peer&, Responder& out)
{
  proto::GcReply reply;
  std::vector<TmpName> evicted; // removed below, without the lock; the answer comes once they are
  std::shared_ptr<cache::Store> store;
  std::vector<cache::EntryMeta> entries;
  std::unique_lock lock(m_mutex);
  while (m_store != store) { // listed without the lock; again if a reload moved the cache meanwhile
    store = m_store;
    entries.clear();
    if (store) {
      lock.unlock();
      entries = store->list();
      lock.lock();
    }
  }
  if (!store) {
    out.error(Error::io("the cache is off on node " + m_node, ENOENT));
    return;
  }
  for (const auto& e : entries) { // an entry evicted since it was listed is skipped
    if (!r.all && e.source != r.source) {
      continue;
    }
    if (m_pins.count(e.key)) {
      reply.errors.push_back(e.source + ": being staged right now, not evicted");
      continue;
    }
    if (auto aside = m_store->set_aside(e.key); !aside) {
      if (aside.error().code != ENOENT) { // ENOENT: evicted since it was listed
        reply.errors.push_back(aside.error().message);
      }
    } else {
      m_fill_dirs.insert(*aside);
      evicted.emplace_back(m_store, std::move(*aside));
      ++m_counters.evictions;
      reply.actions.push_back(proto::GcAction{e.source, "evicted"});
    }
  }
  lock.unlock();
  for (auto& failed : remove_now(evicted)) {
    if (failed) {
      reply.errors.push_back(std::move(*failed));
    }
  }
  if (!r.all && reply.actions.empty() && reply.errors.empty()) {
    out.error(Error::refused("no cache entry for " + r.source + " on node " + m_node));
    return;
  }
  out.result(reply);
}

cache::CacheLimits Daemon::cache_limits_locked() const
{
  return cache::CacheLimits{m_config.daemon.cache_max_bytes, m_config.daemon.cache_max_entries};
}

void Daemon::evict_locked(const std::shared_ptr<cache::Store>& store, const std::vector<cache::EntryMeta>& victims)
{
  for (const auto& e : victims) {
    if (auto aside = store->set_aside(e.key)) {
      remove_later_locked(store, std::move(*aside));
      ++m_counters.evictions;
      spdlog::info("cache: evicted {} ({} bytes, least recently used)", e.source, e.disk_bytes);
    }
  }
}

void Daemon::evict_to_fit_locked(const std::shared_ptr<cache::Store>& store)
{
  if (!store) {
    return;
  }
  // Best effort: what running jobs use stays, even past the limits (nothing new is published then).
  evict_locked(store, store->make_room(cache::Index::Incoming::none, 0, cache_limits_locked(), pinned_locked()).victims);
}

bool Daemon::make_room_locked(const std::shared_ptr<cache::Store>& store, std::uint64_t disk_bytes)
{
  auto room = store->make_room(cache::Index::Incoming::one, disk_bytes, cache_limits_locked(), pinned_locked());
  if (!room.fits) {
    return false; // evicting what no job uses would not make room: evict nothing
  }
  evict_locked(store, room.victims);
  return true;
}

std::function<bool(const std::string&)> Daemon::pinned_locked() const
{
  return [this](const std::string& key) { return m_pins.count(key) > 0 || m_registry.key_in_use(key); };
}

void Daemon::remove_later_locked(std::shared_ptr<cache::Store> store, std::string name)
{
  m_fill_dirs.insert(name);
  m_removals.emplace_back(std::move(store), std::move(name));
  m_gc_cv.notify_all();
}

void Daemon::remove_later_locked(const std::shared_ptr<cache::Store>& store, cache::Fill& fill)
{
  remove_later_locked(store, std::exchange(fill.name, {}));
  fill.dir.reset();
}

std::vector<std::optional<std::string>> Daemon::remove_now(const std::vector<TmpName>& names)
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

} // namespace stagehand::daemon
