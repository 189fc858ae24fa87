// stagehandd: the status and cache requests (status, cache ls, cache evict; the cache's keeping is
// service/cache_keeper).
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
  reply.node = m_shared.name;
  auto base = m_shared.open_base();
  std::optional<gc::Snapshot> snap;
  if (base) {
    if (auto s = gc::snapshot_base(base->get(), now_s())) {
      snap = std::move(*s);
    }
  }
  const auto live = gc::live_step_jobs();
  const auto kept = base ? stageout::load_kept(base->get()) : std::vector<stageout::KeptResults>{};
  const std::string& base_path = m_shared.base_path;
  // Before the daemon's lock: the queue's own is held over its saves (a slow or hung state disk).
  const auto pending = m_stage_out ? m_stage_out->pending() : std::vector<stageout::PendingCopy>{};
  std::unique_lock lock(m_shared.mutex);
  status_jobs_locked(snap, live, pending, peer, reply);
  for (const auto& k : kept) {
    if (peer.root() || k.uid == peer.uid) {
      reply.jobs.push_back(proto::JobInfo{k.job_id, "", k.uid, base_path + "/" + k.dir, stageout::kept_state(k)});
    }
  }
  const auto totals = m_shared.keeper.totals(); // from the index: no manifest is read
  reply.cache.entries = totals.entries;
  reply.cache.bytes = totals.bytes;
  reply.cache.max_bytes = m_shared.config.daemon.cache_max_bytes;
  reply.cache.hits = m_shared.counters.hits;
  reply.cache.misses = m_shared.counters.misses;
  reply.cache.evictions = m_shared.keeper.evictions();
  reply.cache.fills_dropped = m_shared.counters.fills_dropped;
  lock.unlock();
  using Viewer = service::Stagings::Viewer;
  reply.stagings = m_shared.stagings.seen_by(peer.root() ? Viewer::root : Viewer::user, peer.uid); // their own
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
                                const std::vector<stageout::PendingCopy>& pending, const Peer& peer,
                                proto::StatusReply& reply)
{
  const std::string& base_path = m_shared.base_path;
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
      const auto rec = m_shared.registry.find(*job);
      const bool running = live.count(*job) > 0 || (rec && rec->state == registry::JobState::running);
      auto marker = snap->markers.find(*job);
      const bool kept = marker != snap->markers.end() && marker->second.until > snap->now &&
                        (marker->second.ino == 0 || marker->second.ino == e.ino);
      add(*job, e.uid, running ? "running" : kept ? "kept" : "orphan");
    }
  }
  for (const auto& p : pending) {
    if (!peer.root() && p.uid != peer.uid) {
      continue;
    }
    listed.insert(p.job_id);
    reply.jobs.push_back(proto::JobInfo{p.job_id, "", p.uid, base_path + "/" + p.dir,
                                        "stage-out pending (attempt " + std::to_string(p.attempts) + ")"});
  }
}

void Daemon::on_cache_list(const Peer& peer, Responder& out)
{
  proto::CacheListReply reply;
  // Copied from the index without the daemon's lock; what the jobs use is asked under it after.
  auto entries = m_shared.keeper.list();
  std::lock_guard lock(m_shared.mutex);
  std::set<std::string> mine; // keys the peer's jobs used
  m_shared.registry.read([&](const registry::Registry& reg) {
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
    reply.entries.push_back(
      proto::CacheEntryInfo{e.source, e.disk_bytes, e.files, e.last_used, m_shared.keeper.in_use(e.key)});
  }
  out.result(reply);
}

void Daemon::on_cache_evict(const proto::CacheEvict& r, const Peer&, Responder& out)
{
  auto chosen = [&](const cache::EntryMeta& e) { return r.all || e.source == r.source; };
  auto done = m_shared.keeper.evict(chosen, m_shared.mutex); // the answer comes once they are removed
  if (done.cache_off) {
    out.error(Error::io("the cache is off on node " + m_shared.name, ENOENT));
    return;
  }
  if (!r.all && done.evicted.empty() && done.errors.empty()) {
    out.error(Error::refused("no cache entry for " + r.source + " on node " + m_shared.name));
    return;
  }
  proto::GcReply reply;
  for (auto& source : done.evicted) {
    reply.actions.push_back(proto::GcAction{std::move(source), "evicted"});
  }
  reply.errors = std::move(done.errors);
  out.result(reply);
}

} // namespace stagehand::daemon
