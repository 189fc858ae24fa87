// stagehandd's request handling: one object wires the service pieces (src/stagehand/service: the
// registry's keeper, the cache's keeper, the reads under way, the stagings, the stage-out queue,
// each with its own state) to the requests; handlers (one file each), the GC thread and the fill
// thread go through it. Decisions come from the pure library rooms (proto, registry, cache, gc).
#pragma once

#include "stagehand/service/fill_thread.hpp"
#include "stagehand/service/node.hpp"
#include "stagehand/service/peer.hpp"
#include "stagehand/service/stage_out_queue.hpp"
#include "stagehand/config/config.hpp"
#include "stagehand/gc/collect.hpp"
#include "stagehand/proto/messages.hpp"
#include "stagehand/registry/registry.hpp"
#include "stagehand/util/fd.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

namespace stagehand::daemon {

using service::Counters;
using service::now_s;
using service::Peer;
using service::RegistryKeeper;
using service::Responder;
using service::StageOutQueue;

class Daemon
{
public:
  Daemon(Config config, std::string config_path, std::string node);
  ~Daemon();

  // Opens the state directory, loads the registry, opens the cache (a cache that cannot be opened
  // leaves the daemon running without one: staging then happens in the job).
  Status start();
  // Re-reads the configuration (SIGHUP). The socket path cannot change without a restart.
  Status reload();
  void start_gc_thread();
  void start_fill_thread();
  void start_lock_watch();
  // Stops the threads and saves the registry; false (nothing stopped) when the node's lock is held
  // by a thread that waits in the kernel: the caller then saves the state and leaves with _exit.
  bool stop();
  // Whether the node's lock has been out of reach for k_lock_patience (its holder waits in the kernel).
  bool lock_out_of_reach() const;
  // Persists the registry now (at shutdown, when workers may still run).
  void save_state();

  // Fixed at start (a reload that changes it takes effect at the next start): read without a lock.
  const std::string& socket_path() const { return m_socket_path; }
  void handle(const proto::Request& request, const Peer& peer, Responder& out);
  // Why `request` cannot be served now, or nothing: one that needs the node's lock while that lock
  // has been out of reach for k_lock_patience (an io error: the client goes on without the daemon;
  // the first such answer is logged). Never blocks: also the server's screen for waiting requests.
  std::optional<Error> cannot_serve_now(const proto::Request& request, const Peer& peer);

  // Runs one garbage collection now (also what `stagehand gc` asks for).
  proto::GcReply collect(bool dry_run);


private:
  void on_register(const proto::RegisterJob& r, const Peer& peer, Responder& out);
  void on_stage_out_retry(const proto::StageOutRetry& r, const Peer& peer, Responder& out);
  void on_end_job(const proto::EndJob& r, const Peer& peer, Responder& out);
  void on_stage(const proto::Stage& r, const Peer& peer, Responder& out);
  void on_cache_view(const proto::CacheView& r, const Peer& peer, Responder& out);
  void on_status(const Peer& peer, Responder& out);
  void on_cache_list(const Peer& peer, Responder& out);
  void on_cache_evict(const proto::CacheEvict& r, const Peer& peer, Responder& out);

  // Refused for a job running as the cache's service user (stage_handlers.cpp).
  Status not_the_service_users(const registry::JobRecord& job);
  // The job a stage request is for, if `peer` may stage for it (adopting a job whose prolog ran
  // while the daemon was down, when its directory is owned by the peer).
  Result<registry::JobRecord> job_for(std::uint32_t job_id, const Peer& peer);
  void write_metrics();
  void gc_loop();
  void kick_gc();
  // Sets `cause` (a member guarded by m_gc_mutex) and wakes the GC thread.
  void wake_gc(bool& cause);
  // Parts of collect() (gc_thread.cpp) and on_status() (queries.cpp).
  // The registry's running jobs into `evidence`, and the cache now into `store`; true when a
  // running record has no slurmstepd here.
  bool note_registered_running(gc::Evidence& evidence, std::shared_ptr<cache::Store>& store);
  // slurmctld's running jobs on this node into `evidence`; logs when it stops or starts answering.
  void ask_slurmctld(gc::Evidence& evidence);
  // Ends the jobs GC found ended, forgets old ended records, and saves the registry if it changed.
  // The stage-outs this daemon's queue still has to copy (its own list: the state_dir it started
  // with, whatever a reload says); nullopt before the queue is started.
  std::optional<std::set<std::string>> pending_stage_outs() const;
  // `asked_at`: when slurmctld was asked for the jobs it runs here (nullopt: it was not).
  void registry_after_gc_locked(const gc::Plan& plan, const gc::Evidence& evidence,
                                std::optional<std::int64_t> asked_at);
  // The job directories in `snap` and the `pending` stage-outs (the queue's, asked before the
  // daemon's lock) that `peer` may see, into `reply`.
  void status_jobs_locked(const std::optional<gc::Snapshot>& snap, const std::set<std::uint32_t>& live,
                          const std::vector<stageout::PendingCopy>& pending, const Peer& peer,
                          proto::StatusReply& reply);

  // Fixed at start
  std::string m_config_path;
  std::atomic<bool> m_ctld_unreachable{false};

  // What the pieces share: the node, its configuration, the keepers, the reads under way; its
  // mutex guards the members below too (but the GC thread's wake, under m_gc_mutex), and is taken
  // before any piece's own lock.
  service::Node m_shared;
  const std::string m_socket_path; // the socket this daemon listens on, from the start's configuration
  const std::string m_state_path;  // its state directory, likewise
  service::FillThread m_fills{m_shared}; // spools become entries, after their jobs have their data

  UniqueFd m_state_dir;
  gc::ReportOnce m_gc_reported; // failures GC has logged already
  std::shared_ptr<StageOutQueue> m_stage_out; // --stage-out copies after the jobs (own lock)

  std::thread m_gc_thread; // own thread: the daemon's
  // What wakes it: a kick, a removal set aside, the stop; under a lock of its own, not the node's:
  // a kick (end_job's, after its answer) must not wait where a cache disk that stopped answering
  // holds that. Taken after the node's and the cache keeper's (whose removals wake it); nothing is
  // taken under it.
  std::mutex m_gc_mutex;
  std::condition_variable m_gc_cv;
  bool m_gc_kicked = false;  // (m_gc_mutex)
  bool m_gc_removal = false; // (m_gc_mutex)
  bool m_stopping = false;   // (m_gc_mutex)
};

} // namespace stagehand::daemon
