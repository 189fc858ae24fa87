// One source of a stage request (StageRequest::stage_one): identified as the job user, then a hit, a
// wait for another job's read, or this request's own read (cache/stage_plan decides which), then
// placed in the job's directory and counted.
#include "stagehand/service/stage_request.hpp"

#include "stagehand/archive/entry_path.hpp"
#include "stagehand/cache/materialise.hpp"
#include "stagehand/cache/spool.hpp"
#include "stagehand/cache/stage_plan.hpp"
#include "stagehand/util/cpu_list.hpp"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <ctime>

namespace stagehand::service {

using Clock = std::chrono::steady_clock;

Result<proto::StagedSource> StageRequest::stage_one(const proto::SourceSpec& src)
{
  Sourcing s(src);
  // Read before anything of the source is: its entries must be older than this by the racy window
  // for the fill to be published (cache::changed_near).
  ::clock_gettime(CLOCK_REALTIME, &s.started);
  auto parts = archive::split_entry_path(src.dest);
  if (!parts || parts->empty() || std::string_view((*parts)[0]).starts_with(".stagehand")) {
    return Error::refused(src.shown + ": destination \"" + src.dest + "\" is not allowed");
  }
  s.room = m_max_bytes > m_total ? m_max_bytes - m_total : 0;

  // 1. As the job user: open the source and say what it is.
  if (auto st = identify_source(s); !st) {
    return st.error();
  }
  // 2. A hit, a delivery from another job's read, or our own read.
  auto obtained = obtain(s);
  if (!obtained) {
    return obtained.error();
  }
  if (s.out.cache == proto::CacheOutcome::absent) {
    return s.out;
  }
  // 3. Into the job's directory: delivered already, or a hit's entry linked.
  const double got = s.seconds();
  if (auto st = place(s); !st) {
    return st.error();
  }
  m_total += s.out.bytes;
  s.out.seconds = s.seconds();
  const std::string where = m_user.cpus.empty() ? "" : "; the job's children on its CPUs " + cpu_ranges(m_user.cpus);
  spdlog::info("job {}: {} ({}): {:.2f} s: identified in {:.2f} s, {} in {:.2f} s, linked in {:.2f} s{}", m_job.job_id,
               src.path, proto::outcome_name(s.out.cache), s.out.seconds, s.identified,
               s.out.cache == proto::CacheOutcome::hit ? "found" : "delivered", got - s.identified,
               s.out.seconds - got, where);
  account(s);
  return s.out;
}

Status StageRequest::identify_source(Sourcing& s)
{
  const proto::SourceSpec& src = s.src;
  auto found = identify(src, [&] { return s.seconds(); });
  if (!found) {
    return found.error();
  }
  s.identified = s.seconds();
  s.src_fd = std::move(found->fd);
  s.copy_fd = std::move(found->copy);
  s.identity = found->identity;
  // The entry this request would fill: bytes from the broadcast's copy are the user's word for the
  // source's, so they fill an entry for this user's jobs only.
  s.own_key = s.copy_fd.valid() ? cache::delivered_key(s.identity.key, m_job.uid) : s.identity.key;
  if (src.kind == stage::SourceKind::dir && s.identity.bytes > s.room) {
    return Error::limit(src.shown + ": " + std::to_string(s.identity.bytes) + " bytes, more than the " +
                        std::to_string(s.room) + " left under [stage] max_bytes (limit)");
  }
  s.delivery.src = &src;
  s.delivery.content = src.kind == stage::SourceKind::dir ? stage::StreamContent::tree
                       : found->archive                    ? stage::StreamContent::archive
                                                          : stage::StreamContent::plain_file;
  (void)::fstat(s.src_fd.get(), &s.delivery.file_stat);
  s.delivery.unpack = src.unpack;
  s.delivery.room = s.room;
  s.delivery.seek_first = found->zip;
  return ok_status();
}

Status StageRequest::obtain(Sourcing& s)
{
  for (int attempt = 0;; ++attempt) {
    std::unique_lock lock(m_node.mutex);
    if (!m_store || !m_node.service) {
      return Error::io("the node cache is off", ENOENT);
    }
    auto cached = find_entry_locked(s);
    if (!cached) {
      return cached.error();
    }
    auto reading = m_node.reads.find(s.own_key);
    cache::SourceSituation situation{*cached,           reading != nullptr, attempt,
                                     m_request.misses == proto::Misses::report, s.src.kind, s.copy_fd.valid()};
    switch (cache::next_source_step(situation)) {
    case cache::SourceStep::hit:
      if (s.read_by_job) { // the entry of this job's own read (its task start's): a miss for it
        s.out.cache = proto::CacheOutcome::miss;
      }
      return ok_status();
    case cache::SourceStep::wait_for_read: {
      s.read_by_job = s.read_by_job || reading->job_id == m_job.job_id;
      auto waited = wait_for_read(s, lock, reading);
      if (!waited) {
        return waited.error();
      }
      if (!*waited) {
        continue; // published: a hit; failed: read it ourselves
      }
      return ok_status();
    }
    case cache::SourceStep::report_absent:
      s.out.cache = proto::CacheOutcome::absent;
      s.out.seconds = s.seconds();
      return ok_status();
    case cache::SourceStep::read:
      return read_source(s, lock);
    }
  }
}

Result<bool> StageRequest::find_entry_locked(Sourcing& s)
{
  // The entry every job may use, else the one filled for this user from a broadcast's copy.
  // Pinned as it is found: no eviction takes it while the job materialises it.
  auto meta = m_node.keeper.pin_entry(*m_store, s.identity.key);
  s.hit_key = s.identity.key;
  if (!meta) {
    s.hit_key = cache::delivered_key(s.identity.key, m_job.uid);
    meta = m_node.keeper.pin_entry(*m_store, s.hit_key);
  }
  if (!meta) {
    return false;
  }
  m_pinned.push_back(s.hit_key);
  s.out.how = meta->how;
  if (meta->bytes > s.room) {
    return Error::limit(s.src.shown + ": unpacks to " + std::to_string(meta->bytes) + " bytes, more than the " +
                        std::to_string(s.room) + " left under [stage] max_bytes (limit)");
  }
  return true;
}

Result<bool> StageRequest::wait_for_read(Sourcing& s, std::unique_lock<std::mutex>& lock,
                                     const std::shared_ptr<FillWait>& wait)
{
  m_fills.ask_follow_locked(*wait);
  const std::uint64_t total = s.identity.bytes;
  for (;;) {
    const cache::ReadProgress seen{wait->done, wait->spool_dir != nullptr, wait->progressed, wait->patience_until};
    const auto now = Clock::now();
    switch (cache::next_wait_step(seen, now, k_stalled_fill)) {
    case cache::WaitStep::look_again:
      return false;
    case cache::WaitStep::stalled:
      return Error::io("another job's read of this source has made no progress for " +
                         std::to_string(k_stalled_fill.count()) + " s",
                       ETIMEDOUT);
    case cache::WaitStep::wait_for_read:
      if (!wait->cv.wait_for(lock, k_keepalive, [&] { return wait->done || wait->spool_dir != nullptr; })) {
        if (auto st = keep_alive(lock, proto::Progress{s.src.shown, wait->progress, total, s.seconds()}); !st) {
          return st.error(); // waiting for another job's read
        }
      }
      break;
    case cache::WaitStep::wait_for_entry:
      if (!wait->cv.wait_until(lock, std::min(wait->patience_until, now + k_keepalive), [&] { return wait->done; })) {
        if (auto st = keep_alive(lock, proto::Progress{s.src.shown, total, total, s.seconds()}); !st) {
          return st.error();
        }
      }
      break;
    case cache::WaitStep::deliver_from_spool:
      return deliver_from_spool(s, lock, wait);
    }
  }
}

Status StageRequest::keep_alive(std::unique_lock<std::mutex>& lock, const proto::Progress& p)
{
  lock.unlock();
  progress(p);
  lock.lock();
  if (client_left()) {
    return Error::io("the client went away", EPIPE);
  }
  return ok_status();
}

Result<bool> StageRequest::deliver_from_spool(Sourcing& s, std::unique_lock<std::mutex>& lock,
                                          const std::shared_ptr<FillWait>& wait)
{
  UniqueFd spool(::openat(wait->spool_dir->get(), cache::k_spool_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!spool.valid()) {
    wait->cv.wait_for(lock, k_keepalive, [&] { return wait->done; }); // just filled: a hit
    return false;
  }
  lock.unlock();
  auto got = deliver_from(spool.get(), s.delivery, [&] { return s.seconds(); });
  if (!got) {
    return got.error().with_context(s.src.shown);
  }
  s.delivered = *got;
  s.out.cache = proto::CacheOutcome::miss;
  s.out.note = "delivered from another job's read";
  return true;
}

Status StageRequest::read_source(Sourcing& s, std::unique_lock<std::mutex>& lock)
{
  // The claim on the source, if this job made one at task start, is kept.
  auto wait = m_node.reads.begin(s.own_key, s.identity.key, Clock::now());
  wait->job_id = m_job.job_id;
  m_fill_wait = wait;
  const ipc::Credentials service = *m_node.service;
  lock.unlock();
  auto missed = miss(s.delivery, s.src_fd.get(),
                     MissContext{s.identity, s.started, service, [&] { return s.seconds(); },
                                 s.copy_fd.valid() ? s.copy_fd.get() : s.src_fd.get(), s.own_key});
  lock.lock();
  m_fill_wait.reset();
  wait->follow.reset(); // the read is over: a fill not started yet starts from the whole spool
  if (!missed || !missed->spool) {
    wait->done = true;
    wait->cv.notify_all();
    m_node.reads.end(s.own_key, wait);
    if (!missed) {
      return missed.error().with_context(s.src.shown);
    }
  } else {
    hand_spool_to_fill_locked(s, *missed, wait);
  }
  s.delivered = missed->delivered;
  s.out.cache = missed->spool ? proto::CacheOutcome::miss : proto::CacheOutcome::none;
  s.out.note = missed->why_uncached;
  return ok_status();
}

void StageRequest::hand_spool_to_fill_locked(Sourcing& s, Missed& missed, const std::shared_ptr<FillWait>& wait)
{
  // The jobs waiting for this source wait for its entry about as long as the read took.
  wait->spool_dir = std::make_shared<UniqueFd>(::fcntl(missed.spool->dir.get(), F_DUPFD_CLOEXEC, 0));
  wait->read_time = std::chrono::duration_cast<std::chrono::milliseconds>(
    std::chrono::duration<double>(s.seconds() - s.identified));
  wait->patience_until = cache::entry_patience(Clock::now(), wait->read_time);
  wait->cv.notify_all();
  SpoolFill task;
  task.store = m_store;
  task.fill = std::move(*missed.spool);
  task.key = s.own_key;
  task.source = s.src.path;
  task.tree = s.src.kind == stage::SourceKind::dir;
  task.plain = s.delivery.content == stage::StreamContent::plain_file;
  task.mode = s.delivery.file_stat.st_mode;
  task.spool_bytes = missed.spool_bytes;
  task.unpack = s.src.unpack;
  task.room = s.room;
  task.wait = wait;
  task.job_id = m_job.job_id;
  task.follow = std::move(missed.follow);
  task.filled = std::move(missed.filled);
  m_fills.queue_locked(std::move(task));
}

Status StageRequest::place(Sourcing& s)
{
  if (s.delivered) {
    made(s.delivered->created); // what the delivery itself created, as it created it
    s.out.how = s.delivered->how;
    s.out.files = s.delivered->files;
    s.out.bytes = s.delivered->bytes;
    return ok_status();
  }
  if (client_left()) { // (a lookup on a cache disk that hung a while: the job stages without the daemon by now)
    return Error::io("the client went away", EPIPE).with_context(s.src.shown);
  }
  auto entry = m_store->open_entry(s.hit_key);
  if (!entry) {
    return entry.error();
  }
  auto placed = cache::materialise(entry->get(), cache::k_data_name, m_job_fd.get(), s.src.dest,
                                   cache::JobUser{m_job.uid, m_job.gid});
  if (!placed) {
    return placed.error().with_context(s.src.shown);
  }
  struct stat job {};
  if (::fstat(m_job_fd.get(), &job) == 0) { // (materialise never leaves the job directory's mount)
    made(stage::CreatedName{placed->created_top, job.st_dev, placed->created_ino});
  }
  s.out.files = placed->files;
  s.out.bytes = placed->bytes;
  return ok_status();
}

void StageRequest::account(const Sourcing& s)
{
  std::lock_guard lock(m_node.mutex);
  if (s.out.cache == proto::CacheOutcome::hit) {
    ++m_node.counters.hits;
    (void)m_store->touch(s.hit_key, static_cast<std::int64_t>(std::time(nullptr)));
  } else if (s.out.cache == proto::CacheOutcome::miss) {
    ++m_node.counters.misses;
  }
  m_node.counters.staged_bytes += s.out.bytes;
  m_node.counters.staged_seconds += s.out.seconds;
  if (!s.delivered) { // linked (a hit, or this job's own read's entry): the job's files are the entry's
    m_node.registry.add_cache_key(m_job.job_id, s.hit_key);
  }
}

} // namespace stagehand::service
