// The probe that says how long stagehandd's node lock has been out of reach.
#include "stagehand/service/lock_watch.hpp"

namespace stagehand::service {

LockWatch::LockWatch(std::mutex& watched, std::chrono::milliseconds every)
  : m_state(std::make_shared<State>(watched, every))
{
}

LockWatch::~LockWatch() { (void)stop(std::chrono::seconds(1)); }

void LockWatch::start(OnHadAgain on_had_again)
{
  // own thread: the daemon's (scripts/thread-starts.sh)
  m_thread = std::thread([state = m_state, report = std::move(on_had_again)] { probe(state, report); });
}

bool LockWatch::stop(std::chrono::milliseconds patience)
{
  if (!m_thread.joinable()) {
    return !m_abandoned;
  }
  std::unique_lock lock(m_state->mutex);
  m_state->stopping = true;
  m_state->wake.notify_all();
  if (!m_state->wake.wait_for(lock, patience, [&] { return m_state->ended; })) {
    lock.unlock();
    m_thread.detach(); // in the lock's wait: it ends when the lock is had, or with the process
    m_abandoned = true;
    return false;
  }
  lock.unlock();
  m_thread.join();
  return true;
}

std::chrono::milliseconds LockWatch::out_of_reach() const
{
  const Clock::rep since = m_state->trying_since.load();
  if (since == 0) {
    return std::chrono::milliseconds(0);
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - Clock::time_point(Clock::duration(since)));
}

bool LockWatch::turn_away() { return m_state->turned_away.fetch_add(1) == 0; }

void LockWatch::probe(const std::shared_ptr<State>& state, const OnHadAgain& on_had_again)
{
  for (;;) {
    const auto tried = Clock::now();
    state->trying_since = tried.time_since_epoch().count();
    std::chrono::milliseconds waited{0};
    {
      std::lock_guard had(state->watched);
      state->trying_since = 0;
      waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - tried);
    }
    if (const auto turned = state->turned_away.exchange(0); turned > 0 && on_had_again) {
      on_had_again(waited, turned);
    }
    std::unique_lock lock(state->mutex);
    if (state->wake.wait_for(lock, state->every, [&] { return state->stopping; })) {
      state->ended = true;
      state->wake.notify_all();
      return;
    }
  }
}

} // namespace stagehand::service
