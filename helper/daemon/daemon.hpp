// stagehandd's request handling: one object wires the service pieces (src/stagehand/service: the
// registry's keeper, the cache's keeper, the reads under way, the stagings, the stage-out queue,
// each with its own state) to the requests; handlers (one file each), the GC thread and the fill
// thread go through it. Decisions come from the pure library rooms (proto, registry, cache, gc).
#pragma once


#include "stagehand/service/cache_keeper.hpp"
#include "stagehand/service/metrics.hpp"
#include "stagehand/service/reads.hpp"
#include "stagehand/service/stagings.hpp"
#include "stagehand/service/peer.hpp"
#include "stagehand/service/registry_keeper.hpp"
#include "stagehand/service/stage_out_queue.hpp"
#include "stagehand/cache/fill.hpp"
#include "stagehand/cache/spool.hpp"
#include "stagehand/cache/store.hpp"
#include "stagehand/config/config.hpp"
#include "stagehand/gc/collect.hpp"
#include "stagehand/ipc/child.hpp"
#include "stagehand/ipc/shared_memory.hpp"
#include "stagehand/proto/messages.hpp"
#include "stagehand/registry/registry.hpp"
#include "stagehand/util/fd.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <ctime>

namespace stagehand::daemon {

using service::Counters;
using service::FillWait;
using service::FollowFill;
using service::Peer;
using service::Responder;
using service::RegistryKeeper;
using service::StageOutQueue;

// Wall-clock seconds, as the registry and GC record times.
inline std::int64_t now_s() { return static_cast<std::int64_t>(std::time(nullptr)); }


// A miss's spool waiting to become a cache entry (spool_fill.cpp).
struct SpoolFill
{
  std::shared_ptr<cache::Store> store;
  cache::Fill fill; // its directory holds the spool
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
};

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
  void stop();
  // Persists the registry now (at shutdown, when workers may still run).
  void save_state();

  std::string socket_path() const;
  void handle(const proto::Request& request, const Peer& peer, Responder& out);

  // Runs one garbage collection now (also what `stagehand gc` asks for).
  proto::GcReply collect(bool dry_run);


private:
  friend class StageRun;

  void on_register(const proto::RegisterJob& r, const Peer& peer, Responder& out);
  void on_stage_out_retry(const proto::StageOutRetry& r, const Peer& peer, Responder& out);
  void on_end_job(const proto::EndJob& r, const Peer& peer, Responder& out);
  void on_stage(const proto::Stage& r, const Peer& peer, Responder& out);
  void on_cache_view(const proto::CacheView& r, const Peer& peer, Responder& out);
  void on_status(const Peer& peer, Responder& out);
  void on_cache_list(const Peer& peer, Responder& out);
  void on_cache_evict(const proto::CacheEvict& r, const Peer& peer, Responder& out);

  // The job a stage request is for, if `peer` may stage for it (adopting a job whose prolog ran
  // while the daemon was down, when its directory is owned by the peer).
  Result<registry::JobRecord> job_for(std::uint32_t job_id, const Peer& peer);
  Result<UniqueFd> open_base() const;
  // Whether a running job's directory holds a cache entry (for m_keeper's eviction).
  service::KeyInUse jobs_use_locked() const;
  // The fill thread: spools become entries, one at a time, after their jobs have their data.
  void queue_spool_fill_locked(SpoolFill task);
  void end_spool_fill_locked(SpoolFill& task, bool published);
  void fill_loop();
  Result<cache::FillResult> fill_from_spool(SpoolFill& task, const ipc::Credentials& service);
  // The fill thread starts the fills misses asked to follow their spools (m_follow_starts).
  void start_follow_fills_locked(std::unique_lock<std::mutex>& lock);
  Result<ipc::Child> spawn_follower(FollowFill& f, const ipc::Credentials& service);
  // A fill child's answer, waited for while the fill thread keeps starting followers.
  Result<cache::FillResult> await_fill_child(ipc::Child& child);
  enum class Publish { published, lost_race, not_cached };
  Publish publish_spool_fill(SpoolFill& task, const cache::FillResult& fr);
  void write_metrics();
  void gc_loop();
  void kick_gc();
  // Parts of collect() (gc_thread.cpp) and on_status() (queries.cpp).
  // The registry's running jobs into `evidence`, and the cache now into `store`; true when a
  // running record has no slurmstepd here.
  bool note_registered_running(gc::Evidence& evidence, std::shared_ptr<cache::Store>& store);
  // slurmctld's running jobs on this node into `evidence`; logs when it stops or starts answering.
  void ask_slurmctld(gc::Evidence& evidence);
  // Ends the jobs GC found ended, forgets old ended records, and saves the registry if it changed.
  void registry_after_gc_locked(const gc::Plan& plan, const gc::Evidence& evidence, std::int64_t asked_at);
  // The job directories in `snap` and the pending stage-outs that `peer` may see, into `reply`.
  void status_jobs_locked(const std::optional<gc::Snapshot>& snap, const std::set<std::uint32_t>& live,
                          const Peer& peer, proto::StatusReply& reply);

  // Fixed at start
  std::string m_config_path;
  std::string m_node;
  std::string m_base_path; // [tmpdir] base with %n, fixed at start (a change needs a restart)
  std::atomic<bool> m_ctld_unreachable{false};

  // The job registry and its persistence, under its own lock (written soon by its saver thread,
  // or now at a job's start and end).
  RegistryKeeper m_registry;

  service::Stagings m_stagings; // running stagings, for status (its own lock)
  // The node cache: the store in use, pins, removals, eviction (its own lock, taken after m_mutex;
  // the GC thread removes what it sets aside).
  service::CacheKeeper m_keeper{[this] { m_gc_cv.notify_all(); }};

  // Lock order: m_mutex first, then a piece's own lock, never the reverse: m_keeper's before
  // m_registry's (eviction asks the registry which keys running jobs use); m_registry's,
  // m_stage_out's and m_stagings' are taken last (they call out to nothing). Code that reads the
  // registry with members below holds m_mutex, then asks m_registry.
  std::mutex m_mutex; // guards everything below
  Config m_config;
  UniqueFd m_state_dir;
  std::optional<ipc::Credentials> m_service;
  Counters m_counters;
  service::ReadsUnderWay m_reads; // single flight: the reads under way, by key, and cache_view's claims
  gc::ReportOnce m_gc_reported; // failures GC has logged already
  std::shared_ptr<StageOutQueue> m_stage_out; // --stage-out copies after the jobs (own lock)

  std::deque<SpoolFill> m_spool_fills; // for the fill thread
  // A job waits for `w`'s entry: its fill follows the spool from now on (once).
  void ask_follow_locked(FillWait& w);
  // The leader's fill that may follow; started at once when a job waits already.
  void offer_follow_locked(FillWait& w, std::shared_ptr<FollowFill> f);
  std::deque<std::shared_ptr<FollowFill>> m_follow_starts; // for the fill thread to start
  std::condition_variable m_fill_cv;
  std::thread m_fill_thread;

  std::thread m_gc_thread;
  std::condition_variable m_gc_cv;
  bool m_gc_kicked = false;
  bool m_stopping = false;
};

} // namespace stagehand::daemon
