// Worker threads for independent tasks that may fail: the queue is bounded by the cost of what
// waits (bytes of data), the first error wins and the tasks after it are skipped, drain() waits
// for everything submitted. With no threads, nothing runs in parallel and callers do the work.
// A task goes to a lane (one per thread): a thread runs its own lane's tasks first, in the order
// given, and takes another lane's only when its own is empty (so no order between tasks holds). (The extractor gives each directory a lane, so
// two threads rarely create files in one directory at once and contend for its lock.)
#pragma once

#include "stagehand/util/result.hpp"
#include "stagehand/util/thread.hpp"

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace stagehand {

class TaskPool
{
public:
  using Task = std::function<Status()>;

  TaskPool(unsigned threads, std::size_t max_queued_cost);
  ~TaskPool(); // waits for the tasks already queued
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  bool parallel() const { return !m_threads.empty(); }

  // One thread per core the calling thread may run on (a job's cpuset or CPU binding, not the
  // whole node), at most `max`; none on one core (the caller does the work there).
  static unsigned per_core(unsigned max = 4);

  // Queues `task` on `lane` (any number: taken modulo the threads); blocks while the queued cost
  // is at its bound (a task is always accepted into an empty queue, whatever its cost).
  void submit(Task task, std::size_t cost, std::size_t lane = 0);

  // Waits until every submitted task has run (or been skipped); the first error of any.
  Status drain();

  // Whether a task has failed already.
  bool failed();

  // Drops the tasks that have not started (they never run); drain() still waits for the others.
  void cancel();

private:
  struct Queued
  {
    Task task;
    std::size_t cost = 0;
  };
  void run(std::size_t lane);
  void stop_threads(); // each ends once the tasks queued are done
  // The next task for `lane`'s thread (its own lane first); the queue must not be empty.
  std::deque<Queued>& lane_to_take(std::size_t lane);

  const std::size_t m_max_cost;
  std::mutex m_mutex;
  std::condition_variable m_work;
  std::condition_variable m_space;
  std::condition_variable m_idle;
  std::vector<std::deque<Queued>> m_lanes;
  std::size_t m_queued = 0; // tasks in all lanes
  std::size_t m_queued_cost = 0;
  unsigned m_busy = 0;
  bool m_stop = false;
  std::optional<Error> m_error;
  std::vector<Thread> m_threads;
};

} // namespace stagehand
