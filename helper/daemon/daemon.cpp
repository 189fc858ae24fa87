// stagehandd: start-up, reload, dispatch, the job registry handlers and shutdown (queries.cpp:
// status and cache requests; gc_thread.cpp: garbage collection; stage*.cpp: staging; the stage-out
// queue is service::StageOutQueue).
#include "daemon.hpp"

#include "stagehand/service/metrics.hpp"

#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/gc/collect.hpp"
#include "stagehand/job/stage_out.hpp"
#include "stagehand/stage/progress.hpp"
#include "stagehand/tmpdir/job_dir.hpp"
#include "stagehand/tmpdir/lifecycle.hpp"
#include "stagehand/util/process_wait.hpp"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <string>
#include <variant>
#include <vector>

namespace stagehand::daemon {

namespace {

template<typename... Ts> struct Overloaded : Ts...
{
  using Ts::operator()...;
};
template<typename... Ts> Overloaded(Ts...) -> Overloaded<Ts...>;

} // namespace

Daemon::Daemon(Config config, std::string config_path, std::string node)
  : m_config_path(std::move(config_path)),
    m_shared(std::move(node), std::move(config), [this] { wake_gc(m_gc_removal); }),
    m_socket_path(expand_node(m_shared.config.daemon.socket, m_shared.name)),
    m_state_path(expand_node(m_shared.config.daemon.state_dir, m_shared.name))
{
}

Daemon::~Daemon()
{
  if (!stop()) { // a thread waits in the kernel with the node lock: nothing may be destroyed under it
    spdlog::default_logger()->flush();
    ::_exit(0);
  }
}

Status Daemon::start()
{
  std::lock_guard lock(m_shared.mutex);
  auto state = fs::open_trusted_dir(m_state_path, fs::CreateMissing::yes);
  if (!state) {
    return state.error().with_context("[daemon] state_dir");
  }
  ::fchmod(state->get(), 0700);
  m_state_dir = std::move(*state);
  m_shared.registry.open(m_state_dir.get());
  m_shared.registry.start_saving();
  auto base = m_shared.open_base();
  if (!base) {
    return base.error().with_context("[tmpdir] base");
  }
  auto service = ipc::service_credentials(m_shared.config.daemon.user);
  if (!service) {
    spdlog::error("[daemon] user: {}: the cache is off; jobs stage without it", service.error().message);
  } else {
    m_shared.service = *service;
  }
  std::string cache_shown = "off";
  auto store = cache::Store::open(expand_node(m_shared.config.daemon.cache_dir, m_shared.name));
  if (!store) {
    spdlog::error("[daemon] cache_dir: {}: the cache is off; jobs stage without it", store.error().message);
  } else {
    auto opened = std::make_shared<cache::Store>(std::move(*store));
    auto swept = opened->sweep({});
    if (!swept.empty()) {
      spdlog::info("cache: removed {} interrupted fills and broken entries", swept.size());
    }
    cache_shown = opened->path();
    m_shared.keeper.use_store(std::move(opened));
  }
  m_stage_out = std::make_shared<StageOutQueue>(m_shared.config, m_shared.name, m_state_dir.get());
  m_stage_out->resume();
  spdlog::info("node {}: base {}, cache {} (max {} bytes), {} jobs in the registry", m_shared.name,
               expand_node(m_shared.config.tmpdir.base, m_shared.name), cache_shown,
               m_shared.config.daemon.cache_max_bytes,
               m_shared.registry.read([](const registry::Registry& reg) { return reg.jobs().size(); }));
  return ok_status();
}

Status Daemon::reload()
{
  auto config = load_config(m_config_path, OwnerCheck::require_root_owned);
  if (!config) {
    return config.error();
  }
  // A cache moved by the reload is opened (every manifest read, into its index) without the lock.
  const std::string cache_path = expand_node(config->daemon.cache_dir, m_shared.name);
  const auto in_use = m_shared.keeper.store();
  const bool moved = !in_use || in_use->path() != cache_path;
  Result<cache::Store> opened = Error::internal("not reopened");
  if (moved) {
    opened = cache::Store::open(cache_path);
  }
  // The service user is looked up without the lock too: a name service (LDAP, SSSD) that hangs
  // holds the reload, not every job's request.
  auto service = ipc::service_credentials(config->daemon.user);
  std::unique_lock lock(m_shared.mutex);
  // What did not take is said once more in the last line, which otherwise reads "reloaded FILE".
  std::vector<std::string> not_taken;
  if (expand_node(config->daemon.socket, m_shared.name) != socket_path()) {
    spdlog::warn("reload: [daemon] socket changed; it takes effect at the next restart");
    not_taken.push_back("[daemon] socket (until the next restart)");
  }
  if (expand_node(config->daemon.state_dir, m_shared.name) != m_state_path) {
    spdlog::warn("reload: [daemon] state_dir changed; the daemon keeps {} until the next restart", m_state_path);
    not_taken.push_back("[daemon] state_dir (until the next restart)");
  }
  if (tmpdir::base_path(*config, m_shared.name).value_or("") != m_shared.base_path) {
    spdlog::warn("reload: [tmpdir] base changed; the daemon keeps {} until the next restart", m_shared.base_path);
    not_taken.push_back("[tmpdir] base (until the next restart)");
  }
  m_shared.config = std::move(*config);
  const auto& daemon = m_shared.config.daemon;
  m_shared.keeper.set_limits(cache::CacheLimits{daemon.cache_max_bytes, daemon.cache_max_entries});
  if (service) {
    m_shared.service = *service;
  } else {
    spdlog::error("reload: [daemon] user: {}", service.error().message);
    m_shared.service.reset();
    not_taken.push_back("[daemon] user (the cache is off until a reload finds it)");
  }
  if (moved && opened) {
    m_shared.keeper.use_store(std::make_shared<cache::Store>(std::move(*opened)));
  } else if (moved) {
    spdlog::error("reload: [daemon] cache_dir: {}", opened.error().message);
    not_taken.push_back(in_use ? "[daemon] cache_dir (the cache stays at " + in_use->path() + ")"
                               : std::string("[daemon] cache_dir (the cache stays off)"));
  }
  kick_gc();
  const Config now = m_shared.config;
  lock.unlock();
  if (m_stage_out) { // --stage-out copies from now on, as the jobs' own epilogs copy
    m_stage_out->set_config(now);
  }
  if (not_taken.empty()) {
    spdlog::info("reloaded {}", m_config_path);
  } else {
    std::string except = not_taken.front();
    for (std::size_t i = 1; i < not_taken.size(); ++i) {
      except += " and " + not_taken[i];
    }
    spdlog::warn("reloaded {}, except {}", m_config_path, except);
  }
  return ok_status();
}

void Daemon::start_fill_thread() { m_fills.start(); }

namespace {

// How long the node's lock may be out of reach before requests that need it are answered without
// it. Its holds last microseconds to milliseconds; one that lasts this long waits in the kernel (a
// cache disk, or a filesystem a request reads, that stopped answering). Jobs that asked before then
// wait for their own deadlines (a task start's 15 s) and stage without the daemon; jobs that ask
// after it are told at once.
constexpr auto k_lock_patience = std::chrono::seconds(5);

long long whole_seconds(std::chrono::milliseconds ms)
{
  return static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(ms).count());
}

} // namespace

void Daemon::start_lock_watch()
{
  m_shared.lock_watch.start([](std::chrono::milliseconds out_of_reach, std::uint64_t turned) {
    spdlog::info("the node cache answers again: its lock was had after {} s; {} requests were answered without "
                 "it meanwhile",
                 whole_seconds(out_of_reach), turned);
  });
}

bool Daemon::lock_out_of_reach() const { return m_shared.lock_watch.out_of_reach() >= k_lock_patience; }

std::optional<Error> Daemon::cannot_serve_now(const proto::Request& request, const Peer& peer)
{
  const bool root_only_op =
    std::holds_alternative<proto::CacheEvict>(request) || std::holds_alternative<proto::Gc>(request);
  const bool needs_the_lock = !std::holds_alternative<proto::RegisterJob>(request) &&
                              !std::holds_alternative<proto::EndJob>(request) &&
                              !std::holds_alternative<proto::StageOutRetry>(request) &&
                              !(root_only_op && !peer.root()); // (refused in handle() as before)
  const auto waited = m_shared.lock_watch.out_of_reach();
  if (!needs_the_lock || waited < k_lock_patience) {
    return std::nullopt;
  }
  // (The first since the lock was last had, unless it was had again this very moment.)
  if (m_shared.lock_watch.turn_away() && m_shared.lock_watch.out_of_reach() >= k_lock_patience) {
    spdlog::warn("the node cache's lock has been held for {} s (what holds it waits in the kernel: the cache's "
                 "disk, or a filesystem a request reads, stopped answering); requests that need it are answered "
                 "at once, without it, until it is had again",
                 whole_seconds(waited));
  }
  return Error::io("the node cache has not answered for " + std::to_string(whole_seconds(waited)) +
                     " s (its disk, or a filesystem it reads, hangs); the daemon serves nothing that needs it "
                     "until it does",
                   EAGAIN);
}

void Daemon::save_state() { m_shared.registry.save_now(); }

void Daemon::handle(const proto::Request& request, const Peer& peer, Responder& out)
{
  auto root_only = [&](const char* what) {
    if (peer.root()) {
      return true;
    }
    out.error(Error::refused(std::string(what) + " is for root only"));
    return false;
  };
  if (auto why = cannot_serve_now(request, peer)) {
    out.error(*why);
    return;
  }
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
                        },
                        [&](const proto::StageOutRetry& r) { on_stage_out_retry(r, peer, out); },
                        [&](const proto::CacheView& r) { on_cache_view(r, peer, out); }},
             request);
}

void Daemon::on_register(const proto::RegisterJob& r, const Peer&, Responder& out)
{
  registry::JobRecord rec;
  rec.job_id = r.job_id;
  rec.uid = r.uid;
  rec.gid = r.gid;
  rec.registered_at = now_s();
  rec.staging = r.staging;
  m_shared.registry.change(
    [&](registry::Registry& reg) {
      reg.register_job(rec);
      return RegistryKeeper::Changed::yes;
    },
    RegistryKeeper::Save::now); // on disk before the prolog hears "done"
  spdlog::info("job {}: registered (uid {}{})", r.job_id, r.uid,
               r.staging == stage::StagingAsked::no ? ", no --stage-data" : "");
  out.result(proto::Done{});
}

void Daemon::on_end_job(const proto::EndJob& r, const Peer&, Responder& out)
{
  std::optional<tmpdir::JobOwner> registered;
  if (auto rec = m_shared.registry.find(r.job_id); rec && !r.pending.empty()) {
    registered = tmpdir::JobOwner{r.job_id, rec->uid, rec->gid};
  }
  m_shared.registry.change(
    [&](registry::Registry& reg) {
      reg.end_job(r.job_id, now_s(), r.keep_until);
      return RegistryKeeper::Changed::yes;
    },
    RegistryKeeper::Save::now);
  if (!r.pending.empty()) {
    // Claimed, persisted, then answered, last (after every save: a slow disk may outlast the
    // epilog's 1 s): an epilog that stopped waiting claims the directory before it copies, so
    // that whichever claims it first copies, alone.
    auto taken = m_stage_out ? m_stage_out->take(r, registered, &out)
                             : Result<std::string>(Error::internal("not started"));
    if (!taken) {
      // (ETIMEDOUT: its epilog stopped waiting, and copies alone: the design, not a fault)
      spdlog::log(taken.error().code == ETIMEDOUT ? spdlog::level::warn : spdlog::level::err,
                  "job {}: cannot take its stage-out: {}", r.job_id, taken.error().message);
      out.error(taken.error());
      return;
    }
    spdlog::info("job {}: stage-out handed over ({}, claimed as {})", r.job_id, r.pending, *taken);
  }
  spdlog::info("job {}: ended{}", r.job_id,
               !r.trash.empty() ? ", trash " + r.trash : r.keep_until > 0 ? std::string(", directory kept") : std::string());
  if (r.pending.empty()) {
    out.result(proto::Done{});
  }
  kick_gc(); // the trash goes now, in the background
}

void Daemon::on_stage_out_retry(const proto::StageOutRetry& r, const Peer& peer, Responder& out)
{
  // The copy runs as the results' user, whoever asks; a user may ask only for their own.
  // (The queue's copy of the configuration: the node's lock may be out of reach, a cache disk hung.)
  // Not beside a copy of the same job the queue still makes (a later run's): one DEST, one writer.
  for (const auto& p : m_stage_out->pending()) {
    if (p.job_id == r.job_id && (peer.root() || p.uid == peer.uid)) {
      out.error(Error::refused("a copy of job " + std::to_string(r.job_id) + "'s results is still under way on node " +
                               m_shared.name + " (" + p.dir + "): retry once it has ended (stagehand status)"));
      return;
    }
  }
  auto said = job::retry_kept(m_stage_out->config(), m_shared.name, r.job_id, peer.root() ? 0 : peer.uid,
                              std::chrono::duration_cast<std::chrono::milliseconds>(StageOutQueue::k_copy_budget));
  if (!said) {
    spdlog::warn("job {}: stage-out retry (uid {}): {}", r.job_id, peer.uid, said.error().message);
    out.error(said.error());
    return;
  }
  spdlog::info("job {}: stage-out retry (uid {}): {}", r.job_id, peer.uid, *said);
  out.result(proto::RetryReply{*said});
}

Result<registry::JobRecord> Daemon::job_for(std::uint32_t job_id, const Peer& peer)
{
  auto theirs = [&](const registry::JobRecord& rec) -> Result<registry::JobRecord> {
    if (!peer.root() && rec.uid != peer.uid) {
      return Error::refused("job " + std::to_string(job_id) + " is not yours");
    }
    return rec;
  };
  if (auto rec = m_shared.registry.find(job_id); rec && rec->state == registry::JobState::running) {
    return theirs(*rec);
  }
  // Not registered (its prolog ran while the daemon was down): the directory the prolog made,
  // owned by the job user, is the evidence.
  auto base = m_shared.open_base();
  if (!base) {
    return base.error();
  }
  struct stat st {};
  const std::string name = tmpdir::job_dir_name(job_id);
  auto dir = fs::open_beneath(base->get(), name, O_PATH); // never into a mount the job made there
  if (!dir || ::fstat(dir->get(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Error::refused("job " + std::to_string(job_id) + " has no directory on node " + m_shared.name);
  }
  if (st.st_uid == 0 || (!peer.root() && st.st_uid != peer.uid)) {
    return Error::refused("job " + std::to_string(job_id) + " is not yours");
  }
  registry::JobRecord rec;
  rec.job_id = job_id;
  rec.uid = st.st_uid;
  rec.gid = st.st_gid;
  rec.registered_at = now_s();
  std::optional<registry::JobRecord> registered; // meanwhile, by its prolog
  m_shared.registry.change(
    [&](registry::Registry& reg) {
      if (const auto* now = reg.find(job_id); now && now->state == registry::JobState::running) {
        registered = *now;
        return RegistryKeeper::Changed::no;
      }
      reg.register_job(rec);
      return RegistryKeeper::Changed::yes;
    },
    RegistryKeeper::Save::soon);
  if (registered) {
    return theirs(*registered);
  }
  spdlog::info("job {}: adopted (its directory is owned by uid {})", job_id, st.st_uid);
  return rec;
}

bool Daemon::stop()
{
  if (!m_shared.lock_watch.stop(std::chrono::seconds(1))) {
    return false; // the lock is held by a thread that waits in the kernel (the caller leaves with _exit)
  }
  {
    std::lock_guard lock(m_gc_mutex);
    if (m_stopping) {
      return true;
    }
  }
  wake_gc(m_stopping);
  m_fills.stop();
  if (m_gc_thread.joinable()) {
    m_gc_thread.join();
  }
  m_shared.registry.stop_saving();
  m_shared.registry.save_now(); // nothing when start() did not get as far as the state directory
  return true;
}

void Daemon::write_metrics()
{
  service::MetricsSnapshot m;
  std::string path;
  {
    std::lock_guard lock(m_shared.mutex);
    path = m_shared.config.daemon.metrics_file;
    if (path.empty()) {
      return;
    }
    path = expand_node(path, m_shared.name);
    m.node = m_shared.name;
    m.counters = m_shared.counters;
    m.counters.evictions = m_shared.keeper.evictions();
    m.cache_max_bytes = m_shared.config.daemon.cache_max_bytes;
    m.stuck_children = proc::stuck_children();
  }
  m.running_jobs = m_shared.registry.read([](const registry::Registry& reg) {
    return static_cast<std::uint64_t>(std::count_if(reg.jobs().begin(), reg.jobs().end(), [](const auto& job) {
      return job.second.state == registry::JobState::running;
    }));
  });
  const auto totals = m_shared.keeper.totals(); // from the index: no manifest is read
  m.cache_entries = totals.entries;
  m.cache_bytes = totals.bytes;
  if (auto st = service::write_metrics_file(path, m); !st) {
    spdlog::warn("metrics: {}", st.error().message);
  }
}

} // namespace stagehand::daemon
