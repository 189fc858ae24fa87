// stagehandd's reloads on a thread of their own.
#include "stagehand/service/reload_thread.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <system_error>

namespace stagehand::service {

struct ReloadThread::State
{
  explicit State(std::function<void()> r) : reload(std::move(r)) {}
  std::function<void()> reload;
  std::mutex mutex;
  std::condition_variable cv;
  bool asked = false;
  bool running = false;
  bool stopping = false;
  std::chrono::steady_clock::time_point began{}; // the reload under way
};

ReloadThread::ReloadThread(std::function<void()> reload) : m_state(std::make_shared<State>(std::move(reload)))
{
  try {
    // own thread: the daemon's (scripts/thread-starts.sh)
    m_thread = std::thread([state = m_state] { loop(state); });
  } catch (const std::system_error&) {
    // no thread to be had (EAGAIN): ask() reloads in its caller
  }
}

void ReloadThread::ask()
{
  std::unique_lock lock(m_state->mutex);
  if (m_state->stopping) {
    return;
  }
  if (!m_thread.joinable()) {
    lock.unlock();
    m_state->reload();
    return;
  }
  if (m_state->running && !m_state->asked) {
    const std::chrono::duration<double> so_far = std::chrono::steady_clock::now() - m_state->began;
    spdlog::info("reload: the one before has run for {:.1f} s; this one follows it", so_far.count());
  }
  m_state->asked = true;
  m_state->cv.notify_all();
}

void ReloadThread::close()
{
  std::lock_guard lock(m_state->mutex);
  m_state->stopping = true;
  m_state->asked = false;
  m_state->cv.notify_all();
}

bool ReloadThread::busy() const
{
  std::lock_guard lock(m_state->mutex);
  return m_state->asked || m_state->running;
}

bool ReloadThread::stop()
{
  close();
  bool running = false;
  {
    std::lock_guard lock(m_state->mutex);
    running = m_state->running;
  }
  if (!m_thread.joinable()) {
    return true;
  }
  if (running) {
    m_thread.detach(); // its reload ends with the process (the thread holds State; see the header)
    return false;
  }
  m_thread.join();
  return true;
}

void ReloadThread::loop(const std::shared_ptr<State>& state)
{
  std::unique_lock lock(state->mutex);
  for (;;) {
    state->cv.wait(lock, [&] { return state->stopping || state->asked; });
    if (state->stopping) {
      return;
    }
    state->asked = false;
    state->running = true;
    state->began = std::chrono::steady_clock::now();
    lock.unlock();
    state->reload();
    lock.lock();
    state->running = false;
  }
}

} // namespace stagehand::service
