// cache_view (task start, root's plugin asks): which of a job's sources are hits, each pinned for
// the job, after waiting (bounded) for another job's read of it on this node, or after reading it
// into the cache when this job is the first to ask while other jobs are asking too (an archive or
// a directory, with the cache on the scratch's filesystem, where the job reads its sources
// itself); nothing is staged in the job's directory.
#include "stagehand/service/stage_request.hpp"

#include "stagehand/cache/key.hpp"
#include "stagehand/cache/source.hpp"
#include "stagehand/cache/stage_plan.hpp"
#include "stagehand/proto/child_messages.hpp"

#include <spdlog/spdlog.h>

#include <sys/stat.h>

#include <chrono>
#include <ctime>

namespace stagehand::service {

using Clock = std::chrono::steady_clock;

StageRequest::ViewWait StageRequest::await_fill_for_view(std::unique_lock<std::mutex>& lock, const std::string& key,
                                                        const std::string& shown)
{
  const std::vector<std::string> keys{key, cache::delivered_key(key, m_job.uid)};
  auto wait = m_node.reads.find_any(keys);
  if (!wait) {
    // Nobody reads it yet. Jobs that start together all ask here before any has begun to read:
    // the first is the one that will (it claims the source); the others wait, briefly, for its
    // read to begin, and then for its entry, as for any read under way.
    const auto now = Clock::now();
    if (m_node.reads.claim(key, now, k_view_claim)) {
      m_claimed = true;
      return ViewWait::claimed; // ours to read
    }
    if (m_claimed) {
      return ViewWait::looked; // this job reads another source first: it never waits on a read that may wait on it
    }
    wait = m_node.reads.await_begin(lock, keys, now + k_view_claim_wait);
    if (!wait) {
      return ViewWait::looked;
    }
  }
  // Another job is reading this source: its entry may be a moment away, and a view of it costs
  // this job nothing where a link or a delivery costs a pass over every file. Waited for: the
  // read (at most k_view_read_wait: a long read's waiters stage the usual way, with progress lines
  // in their output), then the entry, until the read's patience runs out (as stage requests do).
  m_fills.ask_follow_locked(*wait);
  (void)wait_saying_so(lock, wait->cv, Clock::now() + k_view_read_wait, shown,
                       [&] { return wait->done || wait->spool_dir != nullptr; });
  if (wait->spool_dir && !m_out.broken()) {
    (void)await_entry(lock, *wait, wait->patience_until, shown);
  }
  return ViewWait::looked;
}

bool StageRequest::others_starting_locked() const
{
  if (m_node.views_asked > 1) {
    return true; // another job asks now
  }
  // Or will: its prolog ran moments ago (jobs started together are allocated together), it was
  // submitted with --stage-data, and it has not asked yet.
  const std::int64_t now = std::time(nullptr);
  return m_node.registry.read([&](const registry::Registry& reg) {
    for (const auto& [id, rec] : reg.jobs()) {
      if (id != m_job.job_id && rec.state == registry::JobState::running && rec.registered_at >= now - k_together &&
          rec.staging == stage::StagingAsked::yes && !m_node.viewed_jobs.contains(id)) {
        return true;
      }
    }
    return false;
  });
}

bool StageRequest::wait_saying_so(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                                  Clock::time_point until, const std::string& shown, const std::function<bool()>& done)
{
  const auto t0 = Clock::now();
  while (!done() && Clock::now() < until) {
    if (!cv.wait_until(lock, std::min(until, Clock::now() + k_keepalive), done)) {
      // Straight to the task, not recorded: these are no staging's progress (status never lists them).
      lock.unlock();
      m_out.progress(proto::Progress{shown, 0, 0, std::chrono::duration<double>(Clock::now() - t0).count()});
      lock.lock();
      if (m_out.broken()) {
        break; // the task is gone (scancel): nobody waits for this answer
      }
    }
  }
  return done();
}

bool StageRequest::await_entry(std::unique_lock<std::mutex>& lock, FillWait& wait, Clock::time_point until,
                               const std::string& shown)
{
  return wait_saying_so(lock, wait.cv, until, shown, [&] { return wait.done; }) && wait.published;
}

std::string StageRequest::why_not_read_for_view(const Identified& found, const struct timespec& started)
{
  if (!found.dir && (!found.archive || found.zip || found.copy.valid())) {
    return "not an archive read in one pass"; // a plain file's entry is linked; a zip is read whole first
  }
  std::uint64_t cache_max = 0;
  std::uint64_t room = 0;
  {
    std::lock_guard lock(m_node.mutex);
    cache_max = m_node.config.daemon.cache_max_bytes;
    room = m_node.config.stage.max_bytes;
  }
  if (found.dir && found.identity.bytes > room) {
    return "larger than [stage] max_bytes"; // the job's staging refuses it, naming the limit
  }
  if (auto why = cache::uncached_before_read(found.identity, started, cache_max); !why.empty()) {
    return why;
  }
  // The job waits for the cache's fill instead of its own copy: only where both are written to the
  // same filesystem (a cache on a slower disk than the scratch would make the job wait on it).
  auto base = m_node.open_base();
  struct stat scratch {};
  struct stat cache {};
  if (!base || ::fstat(base->get(), &scratch) != 0 || ::stat(m_store->path().c_str(), &cache) != 0 ||
      scratch.st_dev != cache.st_dev) {
    return "the node cache is not on the scratch's filesystem";
  }
  return "";
}

std::optional<double> StageRequest::read_for_view(const proto::SourceSpec& src, Identified& found,
                                                  const struct timespec& started,
                                                  std::chrono::seconds progress_interval)
{
  struct stat file_stat {}; // before the node's lock: an fstat on a share that hangs holds only this job
  (void)::fstat(found.fd.get(), &file_stat);
  std::unique_lock lock(m_node.mutex);
  if (m_view_read && !m_view_read->finished) {
    return std::nullopt; // one at a time: the job's staging reads the others
  }
  if (m_view_read) {
    lock.unlock();
    m_view_read->thread.join();
    lock.lock();
  }
  // Checked with the lock held from here to the read's begin (a reload may have come meanwhile).
  if (!m_node.service) {
    return std::nullopt;
  }
  if (m_node.reads.find(found.identity.key)) {
    // Another job's read of it began meanwhile (this job's claim ran out first): one read of a
    // source at a time; this job's staging waits for that one.
    spdlog::info("job {}: cache view: {}: another job reads it", m_job.job_id, src.path);
    return std::nullopt;
  }
  m_view_read = std::make_unique<ViewRead>(src, found.dir ? stage::SourceKind::dir : stage::SourceKind::file);
  ViewRead& v = *m_view_read;
  Sourcing& s = v.s;
  s.started = started;
  s.identity = found.identity;
  s.src_fd = std::move(found.fd);
  s.own_key = s.identity.key;
  s.room = m_node.config.stage.max_bytes; // the job's limit, as for its own staging
  s.delivery.into = DeliverInto::cache_only;
  s.delivery.src = &v.src;
  s.delivery.content = found.dir ? stage::StreamContent::tree : stage::StreamContent::archive;
  s.delivery.file_stat = file_stat;
  s.delivery.unpack = src.unpack;
  s.delivery.room = s.room;
  // As long as the job would stage before its first progress line: past that, its staging waits
  // for this read and its entry, saying how far they are, as any job waiting on another's read.
  const auto until = Clock::now() + (progress_interval.count() > 0
                                       ? std::min<Clock::duration>(progress_interval, k_view_read_wait)
                                       : Clock::duration(k_view_read_wait));
  v.until = until;
  v.wait = m_node.reads.begin(s.own_key, s.identity.key, Clock::now());
  v.wait->job_id = m_job.job_id;
  m_fill_wait = v.wait;
  m_staging_id = m_node.stagings.open(m_job.uid); // `stagehand status` lists the read as the job's staging
  m_fills.ask_follow_locked(*v.wait); // this job waits for the entry (the read fills it as it reads)
  const ipc::Credentials service = *m_node.service;
  // own thread: the daemon's (scripts/thread-starts.sh)
  v.thread = std::thread([this, &v, service] { run_view_read(v, service); });
  // (A task gone meanwhile (scancel) stops the wait, not the read: it goes on for the node's cache.)
  if (!wait_saying_so(lock, v.wait->cv, until, src.shown, [&] { return v.finished; })) {
    spdlog::info("job {}: cache view: {}: still reading; the job's staging waits for it", m_job.job_id, src.path);
    return std::nullopt;
  }
  if (!v.spooled || !await_entry(lock, *v.wait, until, src.shown)) {
    return std::nullopt;
  }
  return s.seconds();
}

void StageRequest::run_view_read(ViewRead& v, const ipc::Credentials& service)
{
  Sourcing& s = v.s;
  const MissContext context{s.identity, s.started, service, [&] { return s.seconds(); }, s.src_fd.get(), s.own_key};
  auto missed = miss(s.delivery, s.src_fd.get(), context);
  s.src_fd.reset(); // closed (a FLUSH to a FUSE share, a CLOSE to NFS) without the node's lock
  std::lock_guard lock(m_node.mutex);
  m_fill_wait.reset();
  v.wait->follow.reset();
  if (!missed || !missed->spool) {
    v.wait->done = true;
    m_node.reads.end(s.own_key, v.wait);
    spdlog::info("job {}: cache view: {}: not read for a view ({})", m_job.job_id, s.src.path,
                 !missed ? missed.error().message : missed->why_uncached);
  } else {
    hand_spool_to_fill_locked(s, *missed, v.wait);
    // The other jobs wait for this entry as long as this one does: the fill was made as the read
    // went, only its seal is left, and there is no spool to copy from.
    v.wait->patience_until = std::max(v.wait->patience_until, v.until);
    v.spooled = true;
  }
  v.finished = true;
  v.wait->cv.notify_all();
  if (m_staging_id) {
    m_node.stagings.close(*m_staging_id);
    m_staging_id.reset();
  }
}

std::optional<double> StageRequest::read_claimed(std::unique_lock<std::mutex>& lock, const proto::SourceSpec& src,
                                                 Identified& found, const struct timespec& started,
                                                 std::chrono::seconds progress_interval)
{
  // A job starting alone stages its miss as it streams (its own copy, then the cache's fill
  // behind it): cheaper for it alone than waiting for the entry's seal. Jobs starting together
  // share one unpack into the cache instead.
  const bool together = others_starting_locked();
  lock.unlock();
  const std::string why = together ? why_not_read_for_view(found, started) : "no other job starting";
  std::optional<double> read;
  if (why.empty()) {
    read = read_for_view(src, found, started, progress_interval);
  } else {
    spdlog::info("job {}: cache view: {}: left to the job's staging ({})", m_job.job_id, src.path, why);
  }
  lock.lock();
  m_claimed = !read; // read: no claim of this job's is left to wait on
  return read;
}

std::vector<proto::ViewEntry> StageRequest::find_hits(proto::ClaimedMisses claimed,
                                                     std::chrono::seconds progress_interval)
{
  {
    std::lock_guard lock(m_node.mutex);
    m_store = m_node.keeper.store();
    ++m_node.views_asked;
    m_node.mark_viewed_locked(m_job.job_id, k_viewed_kept);
  }
  struct Asked
  {
    Node& node;
    ~Asked()
    {
      std::lock_guard lock(node.mutex);
      --node.views_asked;
    }
  } asked{m_node};
  std::vector<proto::ViewEntry> entries;
  const auto t0 = Clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  for (const auto& src : m_request.sources) {
    proto::ViewEntry hit;
    struct timespec started {}; // before the source is identified (cache::changed_near)
    ::clock_gettime(CLOCK_REALTIME, &started);
    auto found = identify(src, seconds, KindFrom::descriptor); // a file or a directory, one child
    if (!found) {
      spdlog::info("job {}: cache view: {}: {}", m_job.job_id, src.path, found.error().message);
    } else {
      std::unique_lock lock(m_node.mutex);
      std::string entry;
      auto look = [&] {
        entry = found->identity.key;
        auto m = m_store && m_node.service ? m_store->lookup(entry)
                                          : Result<cache::EntryMeta>(Error::io("the node cache is off", ENOENT));
        if (!m && m_store && m_node.service) { // filled for this user from a broadcast's copy
          entry = cache::delivered_key(found->identity.key, m_job.uid);
          m = m_store->lookup(entry);
        }
        return m;
      };
      auto meta = look();
      std::optional<double> read;
      if (!meta && m_store && m_node.service) {
        if (await_fill_for_view(lock, found->identity.key, src.shown) == ViewWait::claimed &&
            claimed == proto::ClaimedMisses::read_for_view) {
          read = read_claimed(lock, src, *found, started, progress_interval);
        }
        meta = look();
      }
      if (meta) {
        hit = proto::ViewEntry{entry, meta->files, meta->bytes, meta->how};
        if (read) {
          hit.cache = proto::CacheOutcome::miss;
          hit.seconds = *read;
        }
        // Pinned for the job until its end: the view's lower layer is this entry.
        m_node.registry.add_cache_key(m_job.job_id, hit.entry, registry::Registry::KeyUse::viewed);
        ++(read ? m_node.counters.misses : m_node.counters.hits);
        (void)m_store->touch(hit.entry, static_cast<std::int64_t>(std::time(nullptr)));
      }
    }
    const bool read_now = hit.cache == proto::CacheOutcome::miss;
    spdlog::info("job {}: cache view: {}: {}", m_job.job_id, src.path,
                 hit.entry.empty() ? "not a hit" : read_now ? "read for the view" : "hit");
    entries.push_back(hit);
  }
  return entries;
}


} // namespace stagehand::service
