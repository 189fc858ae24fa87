// Worker threads that finish the jobs' stage-outs after the jobs, persisted across restarts.
#include "stagehand/service/stage_out_queue.hpp"

#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/job/stage_out.hpp"
#include "stagehand/tmpdir/lifecycle.hpp"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

namespace stagehand::service {

StageOutQueue::StageOutQueue(Config config, std::string node, int state_dir_fd, std::chrono::milliseconds retry_pause)
    : m_config(std::move(config)), m_node(std::move(node)), m_retry_pause(retry_pause),
      m_state_dir(::fcntl(state_dir_fd, F_DUPFD_CLOEXEC, 0))
{
}

void StageOutQueue::save_locked()
{
  if (auto st = stageout::save_pending(m_state_dir.get(), m_pending); !st) {
    spdlog::error("stage-out: cannot save the list of pending copies: {}", st.error().message);
  }
}

void StageOutQueue::resume()
{
  auto loaded = stageout::load_pending(m_state_dir.get());
  if (!loaded) {
    spdlog::error("stage-out: {} (pending copies are not resumed)", loaded.error().message);
    return;
  }
  {
    std::lock_guard lock(m_mutex);
    m_pending = *loaded;
  }
  for (const auto& p : *loaded) {
    spdlog::info("job {}: stage-out: resuming the copy from {}", p.job_id, p.dir);
    start_worker(p);
  }
}

StageOutQueue::Hooks& StageOutQueue::hooks()
{
  static Hooks h;
  return h;
}

Result<std::string> StageOutQueue::take(const proto::EndJob& end, std::optional<tmpdir::JobOwner> registered,
                                        Responder* epilog)
{
  auto job = tmpdir::job_of_stage_out(end.pending);
  if (!job || *job != end.job_id) { // (a name with a '/' has no job)
    return Error::refused("stage-out: \"" + end.pending + "\" is not job " + std::to_string(end.job_id) + "'s directory");
  }
  const Config now = config();
  auto base_fd = tmpdir::open_base(now, m_node);
  if (!base_fd) {
    return base_fd.error();
  }
  const auto gave_up = [] {
    return Error::io("stage-out: the epilog stopped waiting for the hand-over: it copies itself", ETIMEDOUT);
  };
  struct stat st {};
  if (::fstatat(base_fd->get(), end.pending.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 && errno == ENOENT) {
    if (epilog && !epilog->client_gone()) {
      // An epilog closes its connection before it claims: still there, it did not take it. The
      // directory is elsewhere (a reload changed the daemon's base since the job started).
      return Error::refused("stage-out: no " + end.pending + " in the daemon's [tmpdir] base " + now.tmpdir.base +
                            " (a reload changed it since the job started?): the epilog copies itself");
    }
    return gave_up(); // (its claim renamed it: it stopped waiting before this request was read)
  }
  if (!S_ISDIR(st.st_mode) || (st.st_uid == 0 && (!registered || registered->uid == 0))) {
    return Error::refused("stage-out: no job directory " + end.pending + " of a known job user");
  }
  stageout::PendingCopy p;
  p.job_id = end.job_id;
  // Root's since the epilog took it from its user: the user the prolog registered.
  p.uid = st.st_uid != 0 ? st.st_uid : registered->uid;
  p.gid = st.st_uid != 0 ? st.st_gid : registered->gid;
  p.specs = end.stage_out;
  p.base = now.tmpdir.base; // (the daemon's: a restart with another base still copies it from there)
  p.fallback_dir = end.stage_out_dir;
  if (epilog && epilog->client_gone()) {
    return gave_up(); // (not even saved)
  }
  // The claim: the directory renamed to a name only this daemon knows, which is saved first (a
  // restart between the two resumes a copy whose directory is not there, and forgets it). An
  // epilog that gave up waiting claims it the same way before it copies, so exactly one of the
  // two copies: once renamed, the copy is the daemon's, whether the epilog still waits or not.
  p.dir = tmpdir::fresh_stage_out_name(end.job_id);
  {
    std::lock_guard lock(m_mutex);
    m_pending.push_back(p);
    if (auto saved = stageout::save_pending(m_state_dir.get(), m_pending); !saved) {
      m_pending.pop_back();
      return saved.error(); // not persisted, not claimed: the epilog copies itself
    }
  }
  if (hooks().before_claim) {
    hooks().before_claim();
  }
  if (auto claimed = tmpdir::claim_stage_out(base_fd->get(), end.job_id, end.pending, p.dir); !claimed) {
    forget(p.dir);
    if (claimed.error().code == ENOENT) {
      return gave_up(); // the epilog claimed it first
    }
    return claimed.error().with_context("stage-out"); // the epilog copies it where it is
  }
  if (epilog) {
    epilog->result(proto::StageOutTaken{p.dir}); // it may have stopped waiting: its own claim then finds nothing
  }
  start_worker(p);
  return p.dir;
}

std::vector<stageout::PendingCopy> StageOutQueue::pending() const
{
  std::lock_guard lock(m_mutex);
  return m_pending;
}

void StageOutQueue::set_config(const Config& config)
{
  std::lock_guard lock(m_mutex);
  const std::string base = m_config.tmpdir.base; // the daemon's until its restart: its copies are there
  m_config = config;
  m_config.tmpdir.base = base;
}

Config StageOutQueue::config() const
{
  std::lock_guard lock(m_mutex);
  return m_config;
}

Config StageOutQueue::config_for(const stageout::PendingCopy& p) const
{
  Config c = config();
  if (!p.base.empty()) {
    c.tmpdir.base = p.base;
  }
  return c;
}

void StageOutQueue::start_worker(const stageout::PendingCopy& p)
{
  // Detached: the thread holds the queue alive; at exit the copying child dies with it
  // (parent-death signal) and the persisted entry resumes at the next start.
  // own thread: the daemon's (scripts/thread-starts.sh)
  std::thread([self = shared_from_this(), p] { self->work(p); }).detach();
}

bool StageOutQueue::still_there(const stageout::PendingCopy& p) const
{
  auto base_fd = tmpdir::open_base(config_for(p), m_node);
  struct stat st {};
  if (!base_fd || ::fstatat(base_fd->get(), p.dir.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT) {
    return true; // (a base that cannot be opened: the copy says why)
  }
  return false;
}

void StageOutQueue::wait_for_earlier_runs(const stageout::PendingCopy& p)
{
  std::unique_lock lock(m_mutex);
  std::string said; // the earlier copy waited for, once
  m_forgotten.wait(lock, [&] {
    for (const auto& q : m_pending) {
      if (q.dir == p.dir) {
        return true; // none before it
      }
      if (q.job_id == p.job_id) {
        if (said != q.dir) {
          said = q.dir;
          spdlog::info("job {}: stage-out: {} waits for the copy of {} (an earlier run of the job) to end", p.job_id,
                       p.dir, q.dir);
        }
        return false;
      }
    }
    return true;
  });
}

void StageOutQueue::work(stageout::PendingCopy p)
{
  wait_for_earlier_runs(p);
  if (!still_there(p)) {
    // Saved, then never claimed (a restart between the two; the epilog copied it), or removed
    // since by hand: nothing to copy, and no results to keep.
    spdlog::warn("job {}: stage-out: {} is not there; nothing to copy", p.job_id, p.dir);
    forget(p.dir);
    return;
  }
  tmpdir::JobContext job;
  job.owner.job_id = p.job_id;
  job.owner.uid = p.uid;
  job.owner.gid = p.gid;
  job.node = m_node;
  const job::StageOutJob out{p.specs, p.fallback_dir};
  job::StageOutResult r;
  for (;;) {
    {
      std::lock_guard lock(m_mutex);
      for (auto& q : m_pending) {
        if (q.dir == p.dir) {
          q.attempts = ++p.attempts;
        }
      }
      save_locked();
    }
    r = job::stage_out(config_for(p), job, out, p.dir, std::chrono::duration_cast<std::chrono::milliseconds>(k_copy_budget));
    if (hooks().after_attempt) {
      hooks().after_attempt(p, r.outcome == job::CopyOutcome::complete);
    }
    const auto next = stageout::after_attempt(r.outcome == job::CopyOutcome::complete, p.attempts);
    if (next == stageout::AfterAttempt::done) {
      spdlog::info("job {}: {}", p.job_id, r.said);
      break;
    }
    if (next == stageout::AfterAttempt::keep_results) {
      spdlog::error("job {}: {} (attempt {} of {}, giving up)", p.job_id, r.said, p.attempts, stageout::k_max_attempts);
      break;
    }
    spdlog::warn("job {}: {} (attempt {} of {}, retrying in {} s)", p.job_id, r.said, p.attempts,
                 stageout::k_max_attempts, std::chrono::duration_cast<std::chrono::seconds>(m_retry_pause).count());
    std::this_thread::sleep_for(m_retry_pause);
  }
  if (r.outcome != job::CopyOutcome::complete) {
    // Never deleted because a copy failed: kept under a record, said where, until keep_for is up.
    const std::string line = job::keep_results(config_for(p), job, out, p.dir, r.reason(), r.copier);
    forget(p.dir);
    spdlog::error("job {}: {}", p.job_id, line);
    return;
  }
  // Copied: to the trash, removed now.
  const Config cfg = config_for(p);
  auto base_fd = tmpdir::open_base(cfg, m_node);
  auto trash = base_fd ? tmpdir::stage_out_to_trash(base_fd->get(), p.dir) : Result<std::string>(base_fd.error());
  forget(p.dir);
  if (!trash) {
    spdlog::error("job {}: stage-out: {}", p.job_id, trash.error().message);
    return;
  }
  spdlog::info("job {}: stage-out done; {}", p.job_id,
               tmpdir::remove_trash(cfg, m_node, *trash, std::chrono::minutes(10)));
}

void StageOutQueue::forget(const std::string& dir)
{
  std::lock_guard lock(m_mutex);
  std::erase_if(m_pending, [&](const stageout::PendingCopy& q) { return q.dir == dir; });
  save_locked();
  m_forgotten.notify_all();
}

} // namespace stagehand::service
