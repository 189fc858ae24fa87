// TaskPool: one mutex, three condition variables (work queued, room in the queue, all idle).
#include "stagehand/util/task_pool.hpp"

namespace stagehand {

TaskPool::TaskPool(unsigned threads, std::size_t max_queued_cost) : m_max_cost(max_queued_cost)
{
  for (unsigned i = 0; i < threads; ++i) {
    m_threads.emplace_back([this] { run(); });
  }
}

TaskPool::~TaskPool()
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

void TaskPool::submit(Task task, std::size_t cost)
{
  std::unique_lock lock(m_mutex);
  m_space.wait(lock, [&] { return m_queued_cost < m_max_cost || m_queue.empty(); });
  m_queued_cost += cost;
  m_queue.push_back(Queued{std::move(task), cost});
  m_work.notify_one();
}

Status TaskPool::drain()
{
  std::unique_lock lock(m_mutex);
  m_idle.wait(lock, [&] { return m_queue.empty() && m_busy == 0; });
  if (m_error) {
    return *m_error;
  }
  return ok_status();
}

bool TaskPool::failed()
{
  std::lock_guard lock(m_mutex);
  return m_error.has_value();
}

void TaskPool::run()
{
  for (;;) {
    Queued q;
    {
      std::unique_lock lock(m_mutex);
      m_work.wait(lock, [&] { return m_stop || !m_queue.empty(); });
      if (m_queue.empty()) {
        return;
      }
      q = std::move(m_queue.front());
      m_queue.pop_front();
      m_queued_cost -= q.cost;
      ++m_busy;
    }
    m_space.notify_one();
    Status st = failed() ? ok_status() : q.task(); // after a failure the rest is skipped
    q.task = nullptr;                              // release what the task held before going idle
    {
      std::lock_guard lock(m_mutex);
      if (!st && !m_error) {
        m_error = st.error();
      }
      --m_busy;
    }
    m_idle.notify_all();
  }
}

} // namespace stagehand
