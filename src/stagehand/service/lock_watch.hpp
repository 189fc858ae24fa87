// Whether a lock is being had: a probe thread takes it every `every`, and how long it has been
// waiting for it says how long the lock has been out of reach. stagehandd watches its node lock: a
// request that holds that lock and waits in the kernel (the cache's disk, or a filesystem it
// reads, stopped answering) would otherwise hold every request after it too.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace stagehand::service {

class LockWatch
{
public:
  using Clock = std::chrono::steady_clock;
  // Called on the probe's thread, without the lock, when it has the lock again after requests were
  // turned away: how long it had been out of reach, and how many were.
  using OnHadAgain = std::function<void(std::chrono::milliseconds out_of_reach, std::uint64_t turned_away)>;

  explicit LockWatch(std::mutex& watched, std::chrono::milliseconds every = std::chrono::milliseconds(250));
  LockWatch(const LockWatch&) = delete;
  LockWatch& operator=(const LockWatch&) = delete;
  ~LockWatch(); // stop(1 s): a probe still waiting on the lock is left to end with the process

  void start(OnHadAgain on_had_again);
  // Ends the probe within `patience`; false when it still waits on the lock, then and ever after
  // (the lock's owner must outlive it: stagehandd leaves with _exit).
  bool stop(std::chrono::milliseconds patience);

  // How long the probe has been waiting for the lock: 0 while it sleeps between its turns. A
  // process stopped (SIGSTOP) while the probe sleeps does not count.
  std::chrono::milliseconds out_of_reach() const;
  // A request turned away meanwhile: true for the first since the lock was last had.
  bool turn_away();

private:
  struct State
  {
    State(std::mutex& m, std::chrono::milliseconds e) : watched(m), every(e) {}
    std::mutex& watched;
    std::chrono::milliseconds every;
    std::atomic<Clock::rep> trying_since{0}; // when the probe began to wait for the lock (0: it sleeps)
    std::atomic<std::uint64_t> turned_away{0};
    std::mutex mutex; // the probe's sleep and its end
    std::condition_variable wake;
    bool stopping = false;
    bool ended = false;
  };
  static void probe(const std::shared_ptr<State>& state, const OnHadAgain& on_had_again);

  std::shared_ptr<State> m_state; // shared with the probe, which may outlive this
  std::thread m_thread; // own thread: the daemon's (scripts/thread-starts.sh)
  bool m_abandoned = false; // stop() gave up on it
};

} // namespace stagehand::service
