// stagehandd's state and request handling: one object owns the registry, the cache index and the
// counters; handlers (one file each) and the GC thread go through it. Decisions come from the pure
// library rooms (proto, registry, cache, gc); this is where they meet the node.
#pragma once

#include "peer.hpp"

#include "stagehand/service/metrics.hpp"
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
using service::RegistryKeeper;
using service::StageOutQueue;

// Wall-clock seconds, as the registry and GC record times.
inline std::int64_t now_s() { return static_cast<std::int64_t>(std::time(nullptr)); }


// A cache fill that follows a miss's spool as the read writes it, so that the entry is ready
// about when the job's own copy is, for the jobs waiting for it (spool_fill.cpp). Started by the fill thread (a child outlives
// no request thread: its parent-death signal is its parent thread's); the miss gives its verdict
// on the spool through `verdict`, and hands it to the fill thread with the spool, or abandons it.
struct FollowFill
{
  UniqueFd dir;       // the fill's directory (its own descriptor)
  bool tree = false;  // a directory's tar stream, else an archive's bytes
  std::uint64_t room = 0;
  std::string source; // the canonical path, for messages
  std::optional<ipc::SharedMemory<cache::SpoolVerdict>> verdict;
  // Guarded by Daemon::m_mutex:
  std::optional<ipc::Child> child; // once started
  bool abandoned = false;          // the miss ended without a spool worth filling from
};

// One fill in progress; requests for the same key wait for it (single flight): for the entry, or
// (once the source has been read whole) for the spool to deliver from.
struct FillWait
{
  bool done = false;
  bool published = false;
  std::shared_ptr<UniqueFd> spool_dir; // set once the spool holds the whole source: the fill's directory
  std::chrono::milliseconds read_time{0}; // how long the read took: how long a waiter waits for the entry
  std::chrono::steady_clock::time_point patience_until{}; // set with spool_dir: the end of that wait, for every waiter
  std::condition_variable cv;
  std::uint64_t progress = 0;                        // the fill's bytes: read (a file), written (a directory)
  std::chrono::steady_clock::time_point progressed;  // when it last moved (or a directory's entries did)
  // While the leader reads: its fill, to start following the spool when a second job waits (a
  // fill beside the leader's own copy competes with it for cores; only a crowd gains from it).
  std::shared_ptr<FollowFill> follow;
  bool follow_asked = false;
};

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

  struct Staging
  {
    uid_t uid = 0;
    proto::Progress progress;
  };

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
  // Evicts least recently used entries no job uses until `store` is within [daemon]
  // cache_max_bytes and cache_max_entries (or nothing but pinned entries is left).
  void evict_to_fit_locked(const std::shared_ptr<cache::Store>& store);
  // Makes room for one more entry of `disk_bytes` the same way; false (and nothing evicted) when
  // even evicting every entry no running job uses would not: the fill then stays out of the cache.
  bool make_room_locked(const std::shared_ptr<cache::Store>& store, std::uint64_t disk_bytes);
  void evict_locked(const std::shared_ptr<cache::Store>& store, const std::vector<cache::EntryMeta>& victims);
  cache::CacheLimits cache_limits_locked() const;
  // Whether a job uses an entry: being materialised now, or in a running job's directory.
  std::function<bool(const std::string&)> pinned_locked() const;
  // A fill or an evicted entry under `store`'s tmp/, removed later by the GC thread without the
  // lock (a big one takes seconds: no staging, prolog or epilog waits for it). Its name stays in
  // m_fill_dirs until then, so GC's sweep leaves it alone. Called with m_mutex held.
  using TmpName = std::pair<std::shared_ptr<cache::Store>, std::string>;
  void remove_later_locked(std::shared_ptr<cache::Store> store, std::string name);
  // A fill that is not published, likewise (`fill` is left empty).
  void remove_later_locked(const std::shared_ptr<cache::Store>& store, cache::Fill& fill);
  // Removes `names` (set aside as above), then forgets them; called without m_mutex. Returns, for
  // each name in order, nothing when it is gone or why not (logged too; GC's sweep retries it).
  std::vector<std::optional<std::string>> remove_now(const std::vector<TmpName>& names);
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

  // Lock order: m_mutex first, then a piece's own lock (m_registry's, m_stage_out's); never the
  // reverse. Code that reads the registry with members below holds m_mutex, then asks m_registry.
  std::mutex m_mutex; // guards everything below
  Config m_config;
  UniqueFd m_state_dir;
  std::shared_ptr<cache::Store> m_store; // replaced on reload; users hold their own reference
  std::optional<ipc::Credentials> m_service;
  Counters m_counters;
  std::map<std::string, std::shared_ptr<FillWait>> m_fills; // by key
  std::condition_variable m_fills_cv;                        // a read began (an entry in m_fills)
  std::map<std::string, std::chrono::steady_clock::time_point> m_view_claims; // cache_view: misses a starting job will read
  std::set<std::string> m_fill_dirs;                         // tmp/ names in use
  std::vector<TmpName> m_removals;                           // for the GC thread to remove
  std::map<std::string, int> m_pins;                         // keys being materialised
  std::map<std::uint64_t, Staging> m_stagings; // running stagings, for status
  std::uint64_t m_next_staging = 0; // the last staging id given (ids start at 1)
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
