// stagehandd's fill thread: a cache miss's spool becomes a cache entry after its job has the data,
// one at a time, once the node's CPUs have room for it; or, once another job waits for the source,
// a child started here follows the spool as the read writes it (the entry is then ready about when
// the leader's own copy is).
#pragma once

#include "stagehand/cache/fill.hpp"
#include "stagehand/cache/store.hpp"
#include "stagehand/ipc/child.hpp"
#include "stagehand/service/node.hpp"
#include "stagehand/service/reads.hpp"
#include "stagehand/stage/kinds.hpp"

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace stagehand::service {

// A miss's spool waiting to become a cache entry (or a read's fill made already, to be sealed).
struct SpoolFill
{
  std::shared_ptr<cache::Store> store;
  cache::Fill fill; // its directory holds the spool (with `filled`: the fill's data)
  std::string key;
  std::string source; // the canonical path, for the log
  bool tree = false;  // a directory's tar stream, else a file's bytes
  bool plain = false; // a file's bytes that are not unpacked: the spool is the entry's file
  mode_t mode = 0;    // that file's mode
  std::uint64_t spool_bytes = 0;
  stage::Unpack unpack = stage::Unpack::if_archive;
  std::uint64_t room = 0;
  std::shared_ptr<FillWait> wait;
  std::uint32_t job_id = 0;
  std::shared_ptr<FollowFill> follow; // the fill already following the spool, if one started
  // The fill made already, from the read itself (a read into the cache alone: no spool): only
  // sealed and published here.
  std::optional<cache::FillResult> filled;
  std::chrono::steady_clock::time_point queued{}; // when its spool was whole (or its fill made) and handed over
  double held = 0; // seconds its fill waited for room on the CPUs
};

// Its queues are guarded by the node's mutex (the reads' waiters and the fills meet there).
class FillThread
{
public:
  explicit FillThread(Node& node) : m_node(node) {}
  ~FillThread() { stop(); }
  FillThread(const FillThread&) = delete;
  FillThread& operator=(const FillThread&) = delete;

  void start();
  // Drops what waits, and joins the thread.
  void stop();

  // With the node's mutex held: `task` waits its turn (or is dropped, and counted, when too many
  // or too big spools wait already, or the daemon stops).
  void queue_locked(SpoolFill task);
  // A job waits for `w`'s entry: its fill follows the spool from now on (once).
  void ask_follow_locked(FillWait& w);
  // The leader's fill that may follow; started at once when a job waits already.
  void offer_follow_locked(FillWait& w, std::shared_ptr<FollowFill> f);

private:
  void end_locked(SpoolFill& task, bool published);
  void loop();
  // A fill a job waits for, or a plain file's: it never waits for room on the CPUs.
  static bool urgent(const SpoolFill& t);
  bool urgent_queued_locked() const;
  // A lone miss's fill waits for room on the node's CPUs (cache::lone_fill_start), the lock released
  // meanwhile and the followers crowds ask for started: start it, or yield to an urgent one queued
  // meanwhile (it goes back to the front), or stop with the daemon.
  enum class Hold { start, yield, stop };
  Hold await_room_locked(std::unique_lock<std::mutex>& lock, SpoolFill& task);
  Result<cache::FillResult> fill_from_spool(SpoolFill& task, const ipc::Credentials& service);
  // Starts the fills misses asked to follow their spools (m_follow_starts).
  void start_follow_fills_locked(std::unique_lock<std::mutex>& lock);
  Result<ipc::Child> spawn_follower(FollowFill& f, const ipc::Credentials& service);
  // A fill child's answer, waited for while the thread keeps starting followers.
  Result<cache::FillResult> await_fill_child(ipc::Child& child);
  enum class Publish { published, lost_race, not_cached };
  Publish publish_spool_fill(SpoolFill& task, const cache::FillResult& fr);

  Node& m_node;
  std::deque<SpoolFill> m_spools;
  std::deque<std::shared_ptr<FollowFill>> m_follow_starts;
  std::condition_variable m_cv;
  std::thread m_thread; // own thread: the daemon's
  bool m_stopping = false;
};

} // namespace stagehand::service
