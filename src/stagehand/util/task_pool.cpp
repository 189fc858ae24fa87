// TaskPool: one mutex, three condition variables (work queued, room in the queue, all idle).
#include "stagehand/util/task_pool.hpp"

#include "stagehand/util/cpu_list.hpp"

#include <algorithm>
#include <system_error>

namespace stagehand {

TaskPool::TaskPool(unsigned threads, std::size_t max_queued_cost) : m_max_cost(max_queued_cost), m_lanes(threads)
{
  // (Threads of their own stacks: pools run in children forked from the daemon's threads.)
  m_threads.reserve(threads);
  try {
    for (unsigned i = 0; i < threads; ++i) {
      m_threads.emplace_back([this, i] { run(i); });
    }
  } catch (const std::system_error&) {
    // Fewer threads (their lanes' tasks are taken by the others), or none: the caller works.
  } catch (...) {
    stop_threads(); // those started, before the exception leaves with them
    throw;
  }
  if (m_threads.empty()) {
    m_lanes.clear();
  }
}

unsigned TaskPool::per_core(unsigned max)
{
  // hardware_concurrency() counts the node's cores: a job bound to one of them would get writer
  // threads that only take turns with the reader.
  const std::size_t allowed = affinity_of(0).size(); // (any number of CPUs, not cpu_set_t's 1,024)
  const unsigned cores = allowed > 0 ? static_cast<unsigned>(allowed) : std::thread::hardware_concurrency();
  return cores > 1 ? std::min(cores, max) : 0U;
}

TaskPool::~TaskPool() { stop_threads(); }

void TaskPool::stop_threads()
{
  {
    std::lock_guard lock(m_mutex);
    m_stop = true;
  }
  m_work.notify_all();
  for (auto& t : m_threads) {
    t.join();
  }
}

void TaskPool::submit(Task task, std::size_t cost, std::size_t lane)
{
  if (m_lanes.empty()) { // no threads: the caller runs it
    if (Status st = failed() ? ok_status() : task(); !st) {
      std::lock_guard lock(m_mutex);
      m_error = m_error.value_or(st.error());
    }
    return;
  }
  std::unique_lock lock(m_mutex);
  m_space.wait(lock, [&] { return m_queued_cost < m_max_cost || m_queued == 0; });
  m_queued_cost += cost;
  ++m_queued;
  m_lanes[lane % m_lanes.size()].push_back(Queued{std::move(task), cost});
  lock.unlock();
  m_work.notify_one(); // any thread will do: it takes another lane's task when its own is empty
}

Status TaskPool::drain()
{
  std::unique_lock lock(m_mutex);
  m_idle.wait(lock, [&] { return m_queued == 0 && m_busy == 0; });
  if (m_error) {
    return *m_error;
  }
  return ok_status();
}

void TaskPool::cancel()
{
  {
    std::lock_guard lock(m_mutex);
    for (auto& lane : m_lanes) {
      lane.clear();
    }
    m_queued = 0;
    m_queued_cost = 0;
  }
  m_space.notify_all();
  m_idle.notify_all();
}

bool TaskPool::failed()
{
  std::lock_guard lock(m_mutex);
  return m_error.has_value();
}

std::deque<TaskPool::Queued>& TaskPool::lane_to_take(std::size_t lane)
{
  if (!m_lanes[lane].empty()) {
    return m_lanes[lane];
  }
  std::size_t longest = lane;
  for (std::size_t i = 0; i < m_lanes.size(); ++i) {
    if (m_lanes[i].size() > m_lanes[longest].size()) {
      longest = i;
    }
  }
  return m_lanes[longest];
}

void TaskPool::run(std::size_t lane)
{
  for (;;) {
    Queued q;
    {
      std::unique_lock lock(m_mutex);
      m_work.wait(lock, [&] { return m_stop || m_queued > 0; });
      if (m_queued == 0) {
        return;
      }
      auto& from = lane_to_take(lane);
      q = std::move(from.front());
      from.pop_front();
      --m_queued;
      m_queued_cost -= q.cost;
      ++m_busy;
    }
    m_space.notify_one();
    Status st = failed() ? ok_status() : q.task(); // after a failure the rest is skipped
    q.task = nullptr;                              // release what the task held before going idle
    bool idle = false;
    {
      std::lock_guard lock(m_mutex);
      if (!st && !m_error) {
        m_error = st.error();
      }
      --m_busy;
      idle = m_busy == 0 && m_queued == 0;
    }
    if (idle) {
      m_idle.notify_all();
    }
  }
}

} // namespace stagehand
