// stagehandd: start-up, dispatch, the job registry handlers and the GC thread.
#include "daemon.hpp"

#include "metrics.hpp"

#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/gc/collect.hpp"
#include "stagehand/stage/progress.hpp"
#include "stagehand/tmpdir/job_dir.hpp"
#include "stagehand/tmpdir/lifecycle.hpp"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>

namespace stagehand::daemon {

namespace {

template<typename... Ts> struct Overloaded : Ts...
{
  using Ts::operator()...;
};
template<typename... Ts> Overloaded(Ts...) -> Overloaded<Ts...>;

std::int64_t now_s() { return static_cast<std::int64_t>(std::time(nullptr)); }

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

constexpr std::int64_t k_forget_ended_after = 24 * 3600; // registry records of ended jobs
// Removal work per GC pass: a huge trash, or one that another job keeps refilling, never holds
// the GC thread longer; the rest waits for the next pass.
constexpr std::chrono::seconds k_gc_pass_budget{20};

} // namespace

Daemon::Daemon(Config config, std::string config_path, std::string node)
  : m_config_path(std::move(config_path)), m_node(std::move(node)), m_config(std::move(config))
{
  m_base_path = tmpdir::base_path(m_config, m_node).value_or("");
}

Daemon::~Daemon() { stop(); }

std::string Daemon::socket_path() const { return expand_node(m_config.daemon.socket, m_node); }

Status Daemon::start()
{
  std::lock_guard lock(m_mutex);
  auto state = fs::open_trusted_dir(expand_node(m_config.daemon.state_dir, m_node), fs::CreateMissing::yes);
  if (!state) {
    return state.error().with_context("[daemon] state_dir");
  }
  ::fchmod(state->get(), 0700);
  m_state_dir = std::move(*state);
  auto reg = registry::load(m_state_dir.get());
  if (!reg) {
    spdlog::error("registry: {} (starting with an empty one; garbage collection rebuilds it from the disk)",
                  reg.error().message);
    m_registry = registry::Registry{};
  } else {
    m_registry = std::move(*reg);
  }
  auto base = open_base();
  if (!base) {
    return base.error().with_context("[tmpdir] base");
  }
  auto service = ipc::credentials_of_name(m_config.daemon.user);
  if (!service) {
    spdlog::error("[daemon] user: {}: the cache is off; jobs stage without it", service.error().message);
  } else {
    m_service = *service;
  }
  auto store = cache::Store::open(expand_node(m_config.daemon.cache_dir, m_node));
  if (!store) {
    spdlog::error("[daemon] cache_dir: {}: the cache is off; jobs stage without it", store.error().message);
  } else {
    m_store = std::make_shared<cache::Store>(std::move(*store));
    auto swept = m_store->sweep({});
    if (!swept.empty()) {
      spdlog::info("cache: removed {} interrupted fills and broken entries", swept.size());
    }
  }
  m_stage_out = std::make_shared<StageOutQueue>(m_config, m_node, m_state_dir.get());
  m_stage_out->resume();
  spdlog::info("node {}: base {}, cache {} (max {} bytes), {} jobs in the registry", m_node,
               expand_node(m_config.tmpdir.base, m_node), m_store ? m_store->path() : std::string("off"),
               m_config.daemon.cache_max_bytes, m_registry.jobs().size());
  return ok_status();
}

Status Daemon::reload()
{
  auto config = load_config(m_config_path, OwnerCheck::require_root_owned);
  if (!config) {
    return config.error();
  }
  std::lock_guard lock(m_mutex);
  if (expand_node(config->daemon.socket, m_node) != socket_path()) {
    spdlog::warn("reload: [daemon] socket changed; it takes effect at the next restart");
  }
  if (tmpdir::base_path(*config, m_node).value_or("") != m_base_path) {
    spdlog::warn("reload: [tmpdir] base changed; the daemon keeps {} until the next restart", m_base_path);
  }
  m_config = std::move(*config);
  if (auto service = ipc::credentials_of_name(m_config.daemon.user)) {
    m_service = *service;
  } else {
    spdlog::error("reload: [daemon] user: {}", service.error().message);
    m_service.reset();
  }
  if (!m_store || m_store->path() != expand_node(m_config.daemon.cache_dir, m_node)) {
    auto store = cache::Store::open(expand_node(m_config.daemon.cache_dir, m_node));
    if (store) {
      m_store = std::make_shared<cache::Store>(std::move(*store));
    } else {
      spdlog::error("reload: [daemon] cache_dir: {}", store.error().message);
    }
  }
  m_gc_kicked = true;
  m_gc_cv.notify_all();
  spdlog::info("reloaded {}", m_config_path);
  return ok_status();
}

Result<UniqueFd> Daemon::open_base() const
{
  if (m_base_path.empty()) {
    return Error::config("[tmpdir] base: unusable for node " + m_node);
  }
  return fs::open_trusted_dir(m_base_path, fs::CreateMissing::yes);
}

void Daemon::save_state()
{
  std::lock_guard lock(m_mutex);
  save_registry_locked();
}

void Daemon::save_registry_locked()
{
  if (auto st = registry::save(m_state_dir.get(), m_registry); !st) {
    spdlog::error("registry: {}", st.error().message);
  }
}

void Daemon::handle(const proto::Request& request, const Peer& peer, Responder& out)
{
  auto root_only = [&](const char* what) {
    if (peer.root()) {
      return true;
    }
    out.error(Error::refused(std::string(what) + " is for root only"));
    return false;
  };
  std::visit(Overloaded{[&](const proto::RegisterJob& r) {
                          if (root_only("registering a job")) {
                            on_register(r, peer, out);
                          }
                        },
                        [&](const proto::EndJob& r) {
                          if (root_only("ending a job")) {
                            on_end_job(r, peer, out);
                          }
                        },
                        [&](const proto::Stage& r) { on_stage(r, peer, out); },
                        [&](const proto::StatusQuery&) { on_status(peer, out); },
                        [&](const proto::CacheList&) { on_cache_list(peer, out); },
                        [&](const proto::CacheEvict& r) {
                          if (root_only("cache evict")) {
                            on_cache_evict(r, peer, out);
                          }
                        },
                        [&](const proto::Gc& r) {
                          if (root_only("gc")) {
                            out.result(collect(r.dry_run));
                          }
                        }},
             request);
}

void Daemon::on_register(const proto::RegisterJob& r, const Peer&, Responder& out)
{
  {
    std::lock_guard lock(m_mutex);
    registry::JobRecord rec;
    rec.job_id = r.job_id;
    rec.uid = r.uid;
    rec.gid = r.gid;
    rec.registered_at = now_s();
    m_registry.register_job(rec);
    save_registry_locked();
  }
  spdlog::info("job {}: registered (uid {})", r.job_id, r.uid);
  out.result(proto::Done{});
}

void Daemon::on_end_job(const proto::EndJob& r, const Peer&, Responder& out)
{
  if (!r.pending.empty()) {
    // Persisted before the answer: once the epilog hears "done", the copy is the daemon's.
    if (auto taken = m_stage_out ? m_stage_out->take(r) : Status(Error::internal("not started")); !taken) {
      spdlog::error("job {}: cannot take its stage-out: {}", r.job_id, taken.error().message);
      out.error(taken.error());
      return;
    }
    spdlog::info("job {}: stage-out handed over ({})", r.job_id, r.pending);
  }
  {
    std::lock_guard lock(m_mutex);
    m_registry.end_job(r.job_id, now_s(), r.keep_until);
    save_registry_locked();
  }
  spdlog::info("job {}: ended{}", r.job_id,
               !r.trash.empty() ? ", trash " + r.trash : r.keep_until > 0 ? std::string(", directory kept") : std::string());
  out.result(proto::Done{});
  kick_gc(); // the trash goes now, in the background
}

Result<registry::JobRecord> Daemon::job_for(std::uint32_t job_id, const Peer& peer)
{
  std::lock_guard lock(m_mutex);
  if (const auto* rec = m_registry.find(job_id); rec && rec->state == registry::JobState::running) {
    if (!peer.root() && rec->uid != peer.uid) {
      return Error::refused("job " + std::to_string(job_id) + " is not yours");
    }
    return *rec;
  }
  // Not registered (its prolog ran while the daemon was down): the directory the prolog made,
  // owned by the job user, is the evidence.
  auto base = open_base();
  if (!base) {
    return base.error();
  }
  struct stat st {};
  const std::string name = tmpdir::job_dir_name(job_id);
  auto dir = fs::open_beneath(base->get(), name, O_PATH); // never into a mount the job made there
  if (!dir || ::fstat(dir->get(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Error::refused("job " + std::to_string(job_id) + " has no directory on node " + m_node);
  }
  if (st.st_uid == 0 || (!peer.root() && st.st_uid != peer.uid)) {
    return Error::refused("job " + std::to_string(job_id) + " is not yours");
  }
  registry::JobRecord rec;
  rec.job_id = job_id;
  rec.uid = st.st_uid;
  rec.gid = st.st_gid;
  rec.registered_at = now_s();
  m_registry.register_job(rec);
  save_registry_locked();
  spdlog::info("job {}: adopted (its directory is owned by uid {})", job_id, st.st_uid);
  return rec;
}

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
  const std::string& base_path = m_base_path;
  std::lock_guard lock(m_mutex);
  std::set<std::uint32_t> listed;
  auto add = [&](std::uint32_t job, uid_t uid, const std::string& state) {
    if (!peer.root() && uid != peer.uid) {
      return; // a user sees only their own jobs
    }
    if (!listed.insert(job).second) {
      return;
    }
    reply.jobs.push_back(proto::JobInfo{job, user_name(uid), uid, base_path + "/" + tmpdir::job_dir_name(job), state});
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
      const auto* rec = m_registry.find(*job);
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
      reply.jobs.push_back(proto::JobInfo{p.job_id, user_name(p.uid), p.uid, base_path + "/" + p.dir,
                                          "stage-out pending (attempt " + std::to_string(p.attempts) + ")"});
    }
  }
  if (m_store) {
    for (const auto& e : m_store->list()) {
      ++reply.cache.entries;
      reply.cache.bytes += e.disk_bytes;
    }
  }
  reply.cache.max_bytes = m_config.daemon.cache_max_bytes;
  reply.cache.hits = m_counters.hits;
  reply.cache.misses = m_counters.misses;
  reply.cache.evictions = m_counters.evictions;
  for (const auto& [id, staging] : m_stagings) {
    if (peer.root() || staging.uid == peer.uid) { // a user sees only their own
      reply.stagings.push_back(staging.progress);
    }
  }
  // Stagings that run in the job without the daemon (no cache, or it could not) keep a record in
  // the job's directory: read as root with the care root takes with what a user wrote.
  for (const auto& j : reply.jobs) { // the peer's own jobs only, as listed above
    if (!base || j.state != "running") {
      continue;
    }
    if (auto dir = fs::open_beneath(base->get(), tmpdir::job_dir_name(j.job_id), O_RDONLY | O_DIRECTORY)) {
      if (auto p = stage::read_progress_record(dir->get())) {
        reply.stagings.push_back(*p);
      }
    }
  }
  out.result(reply);
}

void Daemon::on_cache_list(const Peer& peer, Responder& out)
{
  proto::CacheListReply reply;
  std::lock_guard lock(m_mutex);
  if (!m_store) {
    out.result(reply);
    return;
  }
  std::set<std::string> mine; // keys the peer's jobs used
  for (const auto& [id, job] : m_registry.jobs()) {
    if (job.uid == peer.uid) {
      mine.insert(job.cache_keys.begin(), job.cache_keys.end());
    }
  }
  for (const auto& e : m_store->list()) {
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
  std::lock_guard lock(m_mutex);
  if (!m_store) {
    out.error(Error::io("the cache is off on node " + m_node, ENOENT));
    return;
  }
  proto::GcReply reply;
  for (const auto& e : m_store->list()) {
    if (!r.all && e.source != r.source) {
      continue;
    }
    if (m_pins.count(e.key)) {
      reply.errors.push_back(e.source + ": being staged right now, not evicted");
      continue;
    }
    if (auto st = m_store->evict(e.key); !st) {
      reply.errors.push_back(st.error().message);
    } else {
      ++m_counters.evictions;
      reply.actions.push_back(proto::GcAction{e.source, "evicted"});
    }
  }
  if (!r.all && reply.actions.empty() && reply.errors.empty()) {
    out.error(Error::refused("no cache entry for " + r.source + " on node " + m_node));
    return;
  }
  out.result(reply);
}

void Daemon::evict_to_fit_locked(std::uint64_t max_bytes)
{
  if (!m_store) {
    return;
  }
  auto entries = m_store->list();
  std::uint64_t total = 0;
  for (const auto& e : entries) {
    total += e.disk_bytes;
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.last_used < b.last_used; });
  for (const auto& e : entries) {
    if (total <= max_bytes) {
      break;
    }
    if (m_pins.count(e.key) || m_registry.key_in_use(e.key)) {
      continue; // an entry a running job uses is never evicted
    }
    if (m_store->evict(e.key)) {
      total -= std::min(total, e.disk_bytes);
      ++m_counters.evictions;
      spdlog::info("cache: evicted {} ({} bytes, least recently used)", e.source, e.disk_bytes);
    }
  }
}

proto::GcReply Daemon::collect(bool dry_run)
{
  proto::GcReply reply;
  reply.dry_run = dry_run;
  auto base = open_base();
  if (!base) {
    reply.errors.push_back(base.error().message);
    return reply;
  }
  auto snap = gc::snapshot_base(base->get(), now_s());
  if (!snap) {
    reply.errors.push_back(snap.error().message);
    return reply;
  }
  gc::Evidence evidence;
  evidence.live_steps = gc::live_step_jobs();
  {
    std::lock_guard lock(m_mutex);
    for (const auto& [id, job] : m_registry.jobs()) {
      if (job.state == registry::JobState::running) {
        evidence.registered_running.insert(id);
      }
    }
  }
  if (gc::needs_slurmctld(*snap, evidence)) {
    evidence.running_here = gc::slurmctld_running(m_node, "squeue", std::chrono::seconds(15));
    const bool down = !evidence.running_here;
    if (down != m_ctld_unreachable.exchange(down)) { // said once per change, not every interval
      if (down) {
        spdlog::warn("gc: slurmctld does not answer (squeue); every job directory whose job may still run is kept");
      } else {
        spdlog::info("gc: slurmctld answers again");
      }
    }
  } else {
    evidence.running_here = std::set<std::uint32_t>{};
  }
  const auto plan = gc::make_plan(*snap, evidence);
  const std::string& base_path = m_base_path;
  if (dry_run) {
    for (const auto& a : plan.remove) {
      reply.actions.push_back(proto::GcAction{base_path + "/" + a.name, gc::reason_name(a.reason)});
    }
    return reply;
  }
  auto applied = gc::apply(base->get(), plan, std::chrono::steady_clock::now() + k_gc_pass_budget);
  for (const auto& a : applied.done) {
    reply.actions.push_back(proto::GcAction{base_path + "/" + a.name, gc::reason_name(a.reason)});
    if (a.reason != gc::Reason::trash) {
      spdlog::info("gc: removed {}/{} ({})", base_path, a.name, gc::reason_name(a.reason));
    }
  }
  for (const auto& f : applied.failures) {
    reply.errors.push_back(base_path + ": " + f.message);
  }
  std::lock_guard lock(m_mutex);
  // Every gc_interval meets the same mount point again: the log says it once.
  for (const auto& f : m_gc_reported.fresh(applied)) {
    spdlog::warn("gc: {}: {}; the rest stays in the trash (said once, retried at every pass)", base_path, f.message);
  }
  ++m_counters.gc_runs;
  for (const auto& a : applied.done) {
    ++m_counters.gc_removed[gc::reason_label(a.reason)];
  }
  m_counters.trash_entries = 0;
  for (const auto& e : snap->entries) {
    if (std::string_view(e.name).starts_with(".trash.")) {
      ++m_counters.trash_entries;
    }
  }
  for (const auto& a : applied.done) {
    if (a.reason == gc::Reason::trash && m_counters.trash_entries > 0) {
      --m_counters.trash_entries;
    }
  }
  // The registry follows what GC found: orphans ended; ended records forgotten after a day.
  bool changed = false;
  for (const auto& [job, state] : plan.jobs) {
    if (state == gc::JobDirState::orphan) {
      m_registry.end_job(job, now_s(), 0);
      changed = true;
    }
  }
  std::vector<std::uint32_t> forget;
  for (const auto& [id, job] : m_registry.jobs()) {
    if (job.state == registry::JobState::ended && now_s() - job.ended_at > k_forget_ended_after &&
        job.keep_until < now_s()) {
      forget.push_back(id);
    }
  }
  for (auto id : forget) {
    m_registry.forget(id);
    changed = true;
  }
  if (changed) {
    save_registry_locked();
  }
  if (m_store) {
    auto swept = m_store->sweep(m_fill_dirs);
    for (const auto& s : swept) {
      reply.actions.push_back(proto::GcAction{m_store->path() + "/" + s, "interrupted cache fill"});
    }
    evict_to_fit_locked(m_config.daemon.cache_max_bytes);
  }
  return reply;
}

void Daemon::kick_gc()
{
  std::lock_guard lock(m_mutex);
  m_gc_kicked = true;
  m_gc_cv.notify_all();
}

void Daemon::gc_loop()
{
  for (;;) {
    auto reply = collect(false);
    if (!reply.actions.empty()) {
      spdlog::debug("gc: {} actions", reply.actions.size());
    }
    write_metrics();
    std::unique_lock lock(m_mutex);
    m_gc_cv.wait_for(lock, m_config.daemon.gc_interval, [&] { return m_stopping || m_gc_kicked; });
    if (m_stopping) {
      return;
    }
    m_gc_kicked = false;
  }
}

void Daemon::start_gc_thread()
{
  m_gc_thread = std::thread([this] { gc_loop(); });
}

void Daemon::stop()
{
  {
    std::lock_guard lock(m_mutex);
    if (m_stopping) {
      return;
    }
    m_stopping = true;
    m_gc_cv.notify_all();
  }
  if (m_gc_thread.joinable()) {
    m_gc_thread.join();
  }
  std::lock_guard lock(m_mutex);
  if (m_state_dir.valid()) {
    save_registry_locked();
  }
}

void Daemon::write_metrics()
{
  MetricsSnapshot m;
  std::string path;
  {
    std::lock_guard lock(m_mutex);
    path = m_config.daemon.metrics_file;
    if (path.empty()) {
      return;
    }
    path = expand_node(path, m_node);
    m.node = m_node;
    m.counters = m_counters;
    m.cache_max_bytes = m_config.daemon.cache_max_bytes;
    if (m_store) {
      for (const auto& e : m_store->list()) {
        ++m.cache_entries;
        m.cache_bytes += e.disk_bytes;
      }
    }
    for (const auto& [id, job] : m_registry.jobs()) {
      if (job.state == registry::JobState::running) {
        ++m.running_jobs;
      }
    }
  }
  if (auto st = write_metrics_file(path, m); !st) {
    spdlog::warn("metrics: {}", st.error().message);
  }
}

} // namespace stagehand::daemon
