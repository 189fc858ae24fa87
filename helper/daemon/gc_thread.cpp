// stagehandd: garbage collection, at start, every gc_interval and when kicked (a job ended).
#include "daemon.hpp"

#include "stagehand/service/metrics.hpp"

#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/util/priority.hpp"
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
#include <utility>

namespace stagehand::daemon {

namespace {

constexpr std::int64_t k_forget_ended_after = 24 * 3600; // registry records of ended jobs
constexpr std::size_t k_max_ended_records = 20000;       // however many a node ends in a day (~5 MB)
// Removal work per GC pass: a huge trash, or one that another job keeps refilling, never holds
// the GC thread longer; the rest waits for the next pass.
constexpr std::chrono::seconds k_gc_pass_budget{20};

// What a pass removed into `reply`, and into the log (but trash, which is removed at every pass).
void report_applied(const std::string& base_path, const gc::Applied& applied, proto::GcReply& reply)
{
  for (const auto& a : applied.done) {
    reply.actions.push_back(proto::GcAction{base_path + "/" + a.name, gc::reason_name(a.reason)});
    if (a.reason != gc::Reason::trash) {
      spdlog::info("gc: removed {}/{} ({})", base_path, a.name, gc::reason_name(a.reason));
    }
  }
  for (const auto& f : applied.failures) {
    reply.errors.push_back(base_path + ": " + f.message);
  }
  for (const auto& m : applied.detached) {
    spdlog::warn("gc: detached a mount a user left on {}/{}", base_path, m);
  }
  for (const auto& v : applied.views_removed) {
    spdlog::info("gc: removed {}/{} (the cache views of an ended job)", base_path, v);
  }
  for (const auto& r : applied.recorded) {
    spdlog::warn("gc: {}/{}: a stage-out nothing copies any more; its results are kept under a record until keep_for",
                 base_path, r);
  }
}

// A pass in the counters: runs, removals by reason, and the trash entries it left.
void count_gc_pass(Counters& counters, const gc::Snapshot& snap, const gc::Applied& applied)
{
  ++counters.gc_runs;
  for (const auto& a : applied.done) {
    ++counters.gc_removed[gc::reason_label(a.reason)];
  }
  counters.trash_entries = 0;
  for (const auto& e : snap.entries) {
    if (std::string_view(e.name).starts_with(".trash.")) {
      ++counters.trash_entries;
    }
  }
  for (const auto& a : applied.done) {
    if (a.reason == gc::Reason::trash && counters.trash_entries > 0) {
      --counters.trash_entries;
    }
  }
}

} // namespace

proto::GcReply Daemon::collect(bool dry_run)
{
  proto::GcReply reply;
  reply.dry_run = dry_run;
  auto base = m_shared.open_base();
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
  std::shared_ptr<cache::Store> store;
  // A record says running, and no slurmstepd here says so.
  const bool registry_unsure = note_registered_running(evidence, store);
  const Config config = m_shared.config_now();
  evidence.pending_stage_outs = pending_stage_outs();
  const gc::Options options = gc::options_from(config);
  std::optional<std::int64_t> asked_at; // when slurmctld was asked; never: its word ends no record
  if (gc::needs_slurmctld(*snap, evidence, options) || registry_unsure) {
    asked_at = now_s();
    ask_slurmctld(evidence);
  } else {
    evidence.running_here = std::set<std::uint32_t>{}; // (the plan needs no answer)
  }
  const auto plan = gc::make_plan(*snap, evidence, options);
  const std::string& base_path = m_shared.base_path;
  if (dry_run) {
    for (const auto& a : plan.remove) {
      reply.actions.push_back(proto::GcAction{base_path + "/" + a.name, gc::reason_name(a.reason)});
    }
    return reply;
  }
  auto applied = gc::apply(base->get(), plan, std::chrono::steady_clock::now() + k_gc_pass_budget);
  report_applied(base_path, applied, reply);
  // The cache's names, listed without the lock (however many entries it holds); set_aside_debris
  // below checks each difference with the index again under it.
  const auto scan = store ? store->scan() : cache::Store::Scan{};
  std::unique_lock lock(m_shared.mutex);
  // Every gc_interval meets the same mount point again: the log says it once.
  for (const auto& f : m_gc_reported.fresh(applied)) {
    spdlog::warn("gc: {}: {}; the rest stays in the trash (said once, retried at every pass)", base_path, f.message);
  }
  count_gc_pass(m_shared.counters, *snap, applied);
  // The registry follows what GC found: orphans ended; ended records forgotten after a day.
  registry_after_gc_locked(plan, evidence, asked_at);
  // A crash's leftovers in the cache, removed below without the lock.
  const auto debris = m_shared.keeper.set_aside_debris(store, scan);
  m_shared.keeper.evict_to_fit_locked();
  lock.unlock();
  std::vector<service::TmpName> names;
  for (const auto& d : debris) {
    names.push_back(d.tmp);
  }
  auto failed = m_shared.keeper.remove_now(names); // reported as removed only once it is
  for (std::size_t i = 0; i < debris.size(); ++i) {
    if (failed[i]) {
      reply.errors.push_back(std::move(*failed[i]));
    } else {
      reply.actions.push_back(proto::GcAction{debris[i].shown, "interrupted cache fill"});
    }
  }
  return reply;
}

bool Daemon::note_registered_running(gc::Evidence& evidence, std::shared_ptr<cache::Store>& store)
{
  std::lock_guard lock(m_shared.mutex);
  store = m_shared.keeper.store();
  return m_shared.registry.read([&](const registry::Registry& reg) {
    bool registry_unsure = false;
    for (const auto& [id, job] : reg.jobs()) {
      if (job.state == registry::JobState::running) {
        evidence.registered_running.insert(id);
        registry_unsure = registry_unsure || !evidence.live_steps.count(id);
      }
    }
    return registry_unsure;
  });
}

void Daemon::ask_slurmctld(gc::Evidence& evidence)
{
  evidence.running_here = gc::slurmctld_running(m_shared.name, "squeue", std::chrono::seconds(15));
  const bool down = !evidence.running_here;
  if (down != m_ctld_unreachable.exchange(down)) { // said once per change, not every interval
    if (down) {
      spdlog::warn("gc: slurmctld does not answer (squeue); every job directory whose job may still run is kept");
    } else {
      spdlog::info("gc: slurmctld answers again");
    }
  }
}

std::optional<std::set<std::string>> Daemon::pending_stage_outs() const
{
  if (!m_stage_out) {
    return std::nullopt; // unknown: no stage-out counts as a stray
  }
  std::set<std::string> names;
  for (const auto& p : m_stage_out->pending()) {
    names.insert(p.dir);
  }
  return names;
}

void Daemon::registry_after_gc_locked(const gc::Plan& plan, const gc::Evidence& evidence,
                                      std::optional<std::int64_t> asked_at)
{
  m_shared.registry.change(
    [&](registry::Registry& reg) {
      bool changed = false;
      for (const auto& [job, state] : plan.jobs) {
        const auto* rec = reg.find(job);
        if (state == gc::JobDirState::orphan && (!rec || rec->state != registry::JobState::ended)) {
          reg.end_job(job, now_s(), 0); // (an end its epilog reported keeps what it said: keep_until)
          changed = true;
        }
      }
      // A running record whose end_job never came (its directory may be gone already): slurmctld's
      // word ends it, and its cache entries are no longer pinned. Not asked, or no answer: all are
      // kept (a job registered since the pass looked at the registry has no slurmstepd yet).
      if (asked_at && evidence.running_here) {
        for (auto job : reg.ended_by_slurmctld(*evidence.running_here, evidence.live_steps, *asked_at)) {
          spdlog::info("job {}: ended (slurmctld no longer runs it on node {}; its end was never reported)", job,
                       m_shared.name);
          reg.end_job(job, now_s(), 0);
          changed = true;
        }
      }
      for (auto id : reg.forgettable(now_s(), k_forget_ended_after, k_max_ended_records)) {
        reg.forget(id);
        changed = true;
      }
      return changed ? RegistryKeeper::Changed::yes : RegistryKeeper::Changed::no;
    },
    RegistryKeeper::Save::soon);
}

void Daemon::kick_gc()
{
  wake_gc(m_gc_kicked); // (its pass waits for the node's lock in the GC thread, not here)
}

void Daemon::wake_gc(bool& cause)
{
  {
    std::lock_guard lock(m_gc_mutex);
    cause = true;
  }
  m_gc_cv.notify_all();
}

void Daemon::gc_loop()
{
  auto next_pass = std::chrono::steady_clock::now();
  bool kicked = false;
  for (;;) {
    const bool pass = kicked || std::chrono::steady_clock::now() >= next_pass;
    if (pass) {
      auto reply = collect(false);
      if (!reply.actions.empty()) {
        spdlog::debug("gc: {} actions", reply.actions.size());
      }
      write_metrics();
    }
    m_shared.keeper.remove_now(m_shared.keeper.take_removals()); // evicted entries and dropped fills, without the lock
    if (pass) {
      std::lock_guard lock(m_shared.mutex); // (the configuration's; the pass has just had it)
      next_pass = std::chrono::steady_clock::now() + m_shared.config.daemon.gc_interval;
    }
    const bool removals = m_shared.keeper.removals_waiting(); // (the keeper's lock: not under m_gc_mutex)
    std::unique_lock lock(m_gc_mutex);
    // A cause set after that look is seen here: each is set under m_gc_mutex. (The registry is
    // written by its keeper's own thread.)
    m_gc_cv.wait_until(lock, next_pass, [&] { return m_stopping || m_gc_kicked || m_gc_removal || removals; });
    if (m_stopping) {
      return;
    }
    kicked = std::exchange(m_gc_kicked, false);
    m_gc_removal = false; // (its removals are taken at the top)
  }
}

void Daemon::start_gc_thread()
{
  // own thread: the daemon's (scripts/thread-starts.sh)
  m_gc_thread = std::thread([this] {
    (void)set_thread_nice(k_job_nice); // removals at a job's priority, not the requests'
    gc_loop();
  });
}

} // namespace stagehand::daemon
