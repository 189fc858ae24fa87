// stagehandd's stage request, one per request (stage_request.cpp: the request's life, progress and
// rollback; stage_identify.cpp: a source identified as the job user; stage_source.cpp: one source,
// hit, wait or read; stage_miss.cpp: a miss's one read; stage_view.cpp: cache_view's hits).
#pragma once

#include "stagehand/service/fill_thread.hpp"
#include "stagehand/service/node.hpp"
#include "stagehand/service/peer.hpp"
#include "stagehand/registry/registry.hpp"

#include "stagehand/cache/fill.hpp"
#include "stagehand/cache/key.hpp"
#include "stagehand/ipc/child.hpp"
#include "stagehand/proto/messages.hpp"
#include "stagehand/stage/run.hpp"

#include <sys/stat.h>
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <ctime>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace stagehand::service {

inline constexpr auto k_keepalive = std::chrono::seconds(5);
inline constexpr auto k_stalled_fill = std::chrono::seconds(600); // a leader fill silent this long is given up on
inline constexpr auto k_view_read_wait = std::chrono::seconds(30); // cache_view: how long it waits for another job's read
inline constexpr auto k_view_claim = std::chrono::seconds(10);     // cache_view: a miss's claim to be read, kept this long
inline constexpr auto k_view_claim_wait = std::chrono::seconds(3); // cache_view: how long for the claimer's read to begin
inline constexpr std::int64_t k_together = 10;     // cache_view: jobs registered this many seconds ago start together
inline constexpr std::int64_t k_viewed_kept = 600; // cache_view: how long a job that asked is remembered (s)

// For each source, the job user's side opens and identifies it; a hit is linked into the job's
// directory; a miss is read once by the service user's side, delivered to the job as the job user
// and spooled for the cache, whose fill follows the spool and is published after the reply (single
// flight: jobs asking meanwhile wait for the entry or deliver from the spool). Any failure removes
// what this request made.
class StageRequest
{
public:
  StageRequest(Node& node, FillThread& fills, const registry::JobRecord& job, ipc::Credentials user,
               const proto::Stage& request, Responder& out);
  ~StageRequest();
  StageRequest(const StageRequest&) = delete;
  StageRequest& operator=(const StageRequest&) = delete;
  void execute();
  // cache_view: for each source, identified as the job user, the entry's name when it is a hit
  // (pinned for the job), else "". Nothing is staged in the job's directory; with `claimed`
  // read_for_view, an archive this job claims is read into the cache first (a miss shown as a view).
  std::vector<proto::ViewEntry> find_hits(proto::ClaimedMisses claimed = proto::ClaimedMisses::staged,
                                         std::chrono::seconds progress_interval = std::chrono::seconds(0));

private:
  Result<UniqueFd> open_job_dir();
  void log_failure(const Error& e) const; // a staging it fails, in the daemon's log
  // What the job's requests staged through the daemon on this node, all together.
  std::uint64_t job_staged() const;
  // Counts this request's bytes for the job; nothing (and what the job had staged before) when
  // that would pass [stage] max_bytes.
  std::optional<std::uint64_t> charge_job();
  void finish_staging();
  void progress(const proto::Progress& p);
  // Our fill is alive though its bytes may not move (empty files, its final walk and sync): jobs
  // waiting for it do not give up on it yet.
  void fill_alive();
  // Waits for a child's message, sending a progress frame every few seconds meanwhile (`none`: only
  // counted for the jobs waiting on this read, for a read no client waits on frame by frame). On
  // any failure the child is killed (the job user may have stopped it: it runs with their uid).
  enum class Frames { sent, none };
  Result<ipc::Message> await(ipc::Child& child, const std::function<proto::Progress()>& status,
                             Frames frames = Frames::sent);
  // What progress() records for the jobs waiting on this request's read, without sending it.
  void record_progress(const proto::Progress& p);
  // The node's lock, if had within about 100 ms (else a lock that owns nothing): its holder may
  // wait in the kernel (a cache disk that stopped answering), and a keepalive must still reach the
  // client, or the client stops waiting while this request goes on. What a keepalive records
  // under it is only the sign of life jobs waiting on this read watch, given again 5 s later.
  std::unique_lock<std::mutex> node_lock_for_a_moment();
  Result<proto::StagedSource> stage_one(const proto::SourceSpec& src);
  // cache_view: waits (bounded) for another job's read and fill of `key` on this node, if any;
  // `claimed` when nobody reads it yet and this job claimed it (its own to read).
  enum class ViewWait { looked, claimed };
  ViewWait await_fill_for_view(std::unique_lock<std::mutex>& lock, const std::string& key, const std::string& shown);
  // Step 1 of a source: opened and identified by the job user's side.
  struct Identified
  {
    cache::SourceIdentity identity;
    UniqueFd fd;
    UniqueFd copy; // the broadcast's delivered copy, read in the source's place (`delivered`)
    bool archive = false;
    bool zip = false;
    bool dir = false; // a directory (cache_view asks for every source as a file: the descriptor says)
  };
  // Whose word the source's kind is: the spec's, or the opened descriptor's (cache_view: root never
  // looks at the source, so a directory is asked for as a file).
  enum class KindFrom { spec, descriptor };
  Result<Identified> identify(const proto::SourceSpec& src, const std::function<double()>& seconds,
                              KindFrom from = KindFrom::spec);
  // Where a miss's read goes: to the job's directory (and the spool), or to the spool alone, for a
  // cache entry a job will be shown as a view (cache_view's read of a claimed source).
  enum class DeliverInto { job_directory, cache_only };
  // One source's delivery into the job's directory, as the job user (stage_miss.cpp).
  struct Delivery
  {
    DeliverInto into = DeliverInto::job_directory;
    const proto::SourceSpec* src = nullptr;
    stage::StreamContent content = stage::StreamContent::plain_file;
    struct stat file_stat {}; // a plain file's mode and times
    stage::Unpack unpack = stage::Unpack::if_archive;
    std::uint64_t room = 0;
    bool seek_first = false; // a zip: read whole before it is unpacked (its index is at its end)
  };
  struct MissContext
  {
    cache::SourceIdentity identity;
    struct timespec started {}; // read before the source was identified (cache::changed_near)
    ipc::Credentials service;
    std::function<double()> seconds;
    int read_fd = -1; // what is read: the source, or the broadcast's copy of it
    std::string key;  // the entry it fills: identity.key, or its delivered_key
  };
  // What a miss delivered, and the spool to fill the cache from (none, and why, when it must not
  // be cached: the source changed during or just before the read, the spool could not keep up).
  struct Missed
  {
    stage::Delivered delivered;
    std::optional<cache::Fill> spool;
    std::uint64_t spool_bytes = 0;
    std::string why_uncached;
    std::shared_ptr<FollowFill> follow; // with `spool`: the fill following it, if one was asked for
    std::optional<cache::FillResult> filled; // with `spool` (its directory, no spool in it): the fill made as read
  };
  // One source on its way (stage_source.cpp): what it is, and what became of it.
  struct Sourcing
  {
    explicit Sourcing(const proto::SourceSpec& spec)
      : src(spec), out{spec.shown, spec.dest, stage::Placement::copied, 0, 0, 0, proto::CacheOutcome::hit, ""}
    {
    }
    double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
    const proto::SourceSpec& src;
    const std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    struct timespec started {}; // read before the source was identified (cache::changed_near)
    std::uint64_t room = 0;     // what the job may still stage
    double identified = 0;      // seconds, once identified
    cache::SourceIdentity identity;
    UniqueFd src_fd;
    UniqueFd copy_fd;    // the broadcast's delivered copy, read in the source's place
    std::string own_key; // the entry this request would fill
    Delivery delivery;
    std::string hit_key; // the entry looked up (a hit's, once found)
    bool read_by_job = false; // waited for a read of this job's own (cache_view's, at task start)
    std::optional<stage::Delivered> delivered;
    proto::StagedSource out;
  };
  // cache_view's read of a claimed source (read_for_view), on its own thread: joined when the
  // request ends, so that a read handed over to the job's staging finishes first.
  struct ViewRead
  {
    // `spec` as the descriptor showed it: cache_view asks for a directory as a file.
    ViewRead(const proto::SourceSpec& spec, stage::SourceKind kind) : src(spec), s(src) { src.kind = kind; }
    ViewRead(const ViewRead&) = delete; // `s` refers to this one's `src`
    ViewRead& operator=(const ViewRead&) = delete;
    proto::SourceSpec src;
    Sourcing s;
    std::shared_ptr<FillWait> wait;
    bool finished = false; // the read is over (its spool handed to the fill thread, or not): the node's lock
    bool spooled = false;
    std::chrono::steady_clock::time_point until; // how long its job waits for the entry
    std::thread thread; // own thread: the daemon's
  };
  Status identify_source(Sourcing& s);
  // cache_view: a source this job claimed, read for its view when other jobs start with it (the
  // node's lock held, released meanwhile): the read's seconds, or nullopt (left to its staging).
  std::optional<double> read_claimed(std::unique_lock<std::mutex>& lock, const proto::SourceSpec& src,
                                     Identified& found, const struct timespec& started,
                                     std::chrono::seconds progress_interval);
  // cache_view, with the node's lock: whether other jobs start on this node with this one (one
  // asks for its views now, or registered moments ago and has not asked yet).
  bool others_starting_locked() const;
  // cache_view: why a source this job claimed is not read into the cache for its view ("": it is).
  std::string why_not_read_for_view(const Identified& found, const struct timespec& started);
  // cache_view: reads a claimed source into the cache (no delivery: the spool, the fill following
  // it from the start; on a thread of its own) and waits for its entry; the seconds taken, or
  // nullopt when none came of it within the job's progress interval: the read then goes on, and
  // the job's staging waits for it (with progress lines) as any job waits for another's read.
  std::optional<double> read_for_view(const proto::SourceSpec& src, Identified& found, const struct timespec& started,
                                      std::chrono::seconds progress_interval);
  void run_view_read(ViewRead& v, const ipc::Credentials& service);
  // Waits on `cv` with `lock` until `done()` or `until`, a progress line of `shown` to the task every
  // k_keepalive meanwhile (the seconds waited); stops early when the task is gone. Whether `done()`.
  bool wait_saying_so(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                      std::chrono::steady_clock::time_point until, const std::string& shown,
                      const std::function<bool()>& done);
  // Waits, on `lock`, for the fill of `wait` until `until`: whether its entry was published.
  bool await_entry(std::unique_lock<std::mutex>& lock, FillWait& wait, std::chrono::steady_clock::time_point until,
                   const std::string& shown);
  // A hit, a delivery from another job's read, or this request's own read (cache/stage_plan).
  Status obtain(Sourcing& s);
  // Whether the cache holds the source (the entry pinned for the job); a limit error when it
  // unpacks to more than the job has left.
  Result<bool> find_entry_locked(Sourcing& s);
  // Waits for another job's read of the source: true once delivered from its spool, false to look
  // again (published: a hit; failed: read it ourselves).
  Result<bool> wait_for_read(Sourcing& s, std::unique_lock<std::mutex>& lock, const std::shared_ptr<FillWait>& wait);
  Result<bool> deliver_from_spool(Sourcing& s, std::unique_lock<std::mutex>& lock,
                                  const std::shared_ptr<FillWait>& wait);
  // A progress frame without the lock; an error when the client went away.
  Status keep_alive(std::unique_lock<std::mutex>& lock, const proto::Progress& p);
  // This request reads the source (single flight: others wait for it) and hands its spool to the fill thread.
  Status read_source(Sourcing& s, std::unique_lock<std::mutex>& lock);
  void hand_spool_to_fill_locked(Sourcing& s, Missed& missed, const std::shared_ptr<FillWait>& wait);
  Status place(Sourcing& s);
  void account(const Sourcing& s);
  Result<ipc::Child> spawn_delivery(int in_fd, const Delivery& d);
  Result<stage::Delivered> delivered_by(const ipc::Message& m) const;
  // From a spool another job's miss wrote (a local file: no read of the source).
  Result<stage::Delivered> deliver_from(int in_fd, const Delivery& d, const std::function<double()>& seconds);
  Result<Missed> miss(const Delivery& d, int src_fd, const MissContext& c);
  struct MissRead; // one miss, in steps (stage_miss.cpp)
  // Removes what this request placed, each only while its name still holds what was placed;
  // nothing once the client has gone (its helper has taken over the job's directory: it removed
  // what was placed and may have staged the same names itself).
  void rollback();
  // `created` (below the job directory, as it was created) was placed by this request: recorded
  // for rollback().
  void made(const stage::CreatedName& created);
  // Whether the client stopped waiting (its helper stages without the daemon now): nothing more
  // is placed for it.
  bool client_left() const { return m_out.broken() || m_out.client_gone(); }

  Node& m_node;
  FillThread& m_fills;
  registry::JobRecord m_job;
  ipc::Credentials m_user;
  const proto::Stage& m_request;
  Responder& m_out;
  UniqueFd m_job_fd;
  std::shared_ptr<cache::Store> m_store;
  std::uint64_t m_max_bytes = 0;          // this request's limit: its own, and what the job has left
  std::uint64_t m_job_limit = 0;          // [stage] max_bytes, for all of the job's requests
  std::shared_ptr<FillWait> m_fill_wait;  // our fill, when we lead one: waiters see its progress
  std::vector<stage::CreatedName> m_made; // placed below the job directory, for rollback
  std::vector<std::string> m_pinned;
  std::uint64_t m_total = 0;
  std::optional<std::uint64_t> m_staging_id; // a staging's entry in status (none for cache_view)
  bool m_claimed = false; // cache_view: this job claimed a source to read
  std::unique_ptr<ViewRead> m_view_read; // cache_view: the last claimed source read for a view
};

} // namespace stagehand::service
