// stagehandd's cache miss after the job has its data: the spool the read left its child writing is
// waited for (the job's reply does not wait for it), then handed whole to the fill thread, or
// dropped saying why (stage_miss.cpp reads; stage_source.cpp decides).
#include "stagehand/service/stage_request.hpp"

#include "stagehand/cache/spool.hpp"
#include "stagehand/proto/child_messages.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>

namespace stagehand::service {

namespace {

constexpr auto k_spool_end_wait = std::chrono::seconds(120); // the writer's lag is at most a lane's bytes

// The spool's end as the read's child says it: "" when whole, else why it is not. Until then the
// read stays alive for the jobs that wait for it.
std::string spool_end(ipc::Child& child, FillWait& wait, std::mutex& mutex)
{
  const auto deadline = std::chrono::steady_clock::now() + k_spool_end_wait;
  for (;;) {
    auto m = ipc::receive_message(child.sock(), std::chrono::duration_cast<std::chrono::milliseconds>(k_keepalive));
    if (m) {
      auto teed = proto::parse_child_message<proto::Teed>(m->text);
      return teed ? teed->dropped : teed.error().message;
    }
    if (m.error().code != ETIMEDOUT) {
      return (m.error().code == EPIPE ? child.why_closed(m.error()) : m.error()).message;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return "the spool was not written within " + std::to_string(k_spool_end_wait.count()) + " s";
    }
    std::lock_guard lock(mutex);
    wait.progressed = std::chrono::steady_clock::now();
  }
}

} // namespace

void StageRequest::abandon_follow(Node& node, const std::shared_ptr<FollowFill>& follow)
{
  if (!follow) {
    return;
  }
  follow->verdict->get()->state.store(static_cast<std::uint64_t>(cache::SpoolState::dropped));
  std::optional<ipc::Child> running;
  {
    std::lock_guard lock(node.mutex);
    follow->abandoned = true;
    running = std::move(follow->child);
    follow->child.reset();
  }
  if (running) {
    running->kill(); // before its directory goes
  }
}

void StageRequest::finish_spools()
{
  for (auto& p : m_spooling) {
    finish_spool(p);
  }
  m_spooling.clear();
}

void StageRequest::finish_own_spool(std::unique_lock<std::mutex>& lock, const std::shared_ptr<FillWait>& wait)
{
  auto it = std::find_if(m_spooling.begin(), m_spooling.end(), [&](const PendingSpool& p) { return p.task.wait == wait; });
  if (it == m_spooling.end()) {
    return;
  }
  PendingSpool p = std::move(*it);
  m_spooling.erase(it);
  lock.unlock();
  finish_spool(p);
  lock.lock();
}

void StageRequest::finish_spool(PendingSpool& p)
{
  const std::string dropped = spool_end(p.spooling, *p.task.wait, m_node.mutex);
  p.spooling.kill(); // it has said its last; whatever it forked ends too
  if (!dropped.empty()) {
    spdlog::info("job {}: {}: not cached ({})", p.task.job_id, p.task.source, dropped);
    abandon_follow(m_node, p.task.follow);
  }
  std::lock_guard lock(m_node.mutex);
  if (dropped.empty()) {
    publish_spool_locked(std::move(p.task), p.read_time);
    return;
  }
  ++m_node.counters.fills_dropped;
  m_node.keeper.remove_later_locked(p.task.store, p.task.fill); // by the GC thread
  p.task.wait->done = true;
  p.task.wait->cv.notify_all();
  m_node.reads.end(p.task.key, p.task.wait);
}

} // namespace stagehand::service
