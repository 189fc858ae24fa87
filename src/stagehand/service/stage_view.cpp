// cache_view (task start, root's plugin asks): which of a job's sources are hits, each pinned for
// the job, after waiting (bounded) for another job's read of it on this node; nothing is staged.
#include "stagehand/service/stage_request.hpp"

#include "stagehand/cache/key.hpp"
#include "stagehand/cache/source.hpp"
#include "stagehand/proto/child_messages.hpp"

#include <spdlog/spdlog.h>

#include <chrono>

namespace stagehand::service {

using Clock = std::chrono::steady_clock;

void StageRequest::await_fill_for_view(std::unique_lock<std::mutex>& lock, const std::string& key,
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
      return; // ours to read
    }
    if (m_claimed) {
      return; // this job reads another source first: it never waits on a read that may wait on it
    }
    wait = m_node.reads.await_begin(lock, keys, now + k_view_claim_wait);
    if (!wait) {
      return;
    }
  }
  // Another job is reading this source: its entry may be a moment away, and a view of it costs
  // this job nothing where a link or a delivery costs a pass over every file. Waited for: the
  // read (at most k_view_read_wait: a long read's waiters stage the usual way, with progress lines
  // in their output), then the entry, until the read's patience runs out (as stage requests do).
  m_fills.ask_follow_locked(*wait);
  const auto t0 = Clock::now();
  const auto read_deadline = t0 + k_view_read_wait;
  auto keepalive = [&] {
    lock.unlock();
    m_out.progress(proto::Progress{shown, 0, 0, std::chrono::duration<double>(Clock::now() - t0).count()});
    lock.lock();
  };
  while (!wait->done && !wait->spool_dir && Clock::now() < read_deadline) {
    if (!wait->cv.wait_until(lock, std::min(read_deadline, Clock::now() + k_keepalive),
                             [&] { return wait->done || wait->spool_dir != nullptr; })) {
      keepalive();
    }
  }
  while (wait->spool_dir && !wait->done && Clock::now() < wait->patience_until) {
    if (!wait->cv.wait_until(lock, std::min(wait->patience_until, Clock::now() + k_keepalive), [&] { return wait->done; })) {
      keepalive();
    }
  }
}

std::vector<proto::ViewEntry> StageRequest::find_hits()
{
  {
    std::lock_guard lock(m_node.mutex);
    m_store = m_node.keeper.store();
  }
  std::vector<proto::ViewEntry> entries;
  const auto t0 = Clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  for (const auto& src : m_request.sources) {
    proto::ViewEntry hit;
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
      if (!meta && m_store && m_node.service) {
        await_fill_for_view(lock, found->identity.key, src.shown);
        meta = look();
      }
      if (meta) {
        hit = proto::ViewEntry{entry, meta->files, meta->bytes, meta->how};
        // Pinned for the job until its end: the view's lower layer is this entry.
        m_node.registry.add_cache_key(m_job.job_id, hit.entry);
        ++m_node.counters.hits;
        (void)m_store->touch(hit.entry, static_cast<std::int64_t>(std::time(nullptr)));
      }
    }
    spdlog::info("job {}: cache view: {}: {}", m_job.job_id, src.path, hit.entry.empty() ? "not a hit" : "hit");
    entries.push_back(hit);
  }
  return entries;
}


} // namespace stagehand::service
