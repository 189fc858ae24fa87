// What stagehandd's pieces share on a node: its name and base, the configuration and the service
// user, the counters, and the pieces that keep their own state (the registry's keeper, the cache's
// keeper, the stagings) or the reads under way. The daemon (helper/daemon) owns one and wires it to
// requests; a stage request (stage_request.hpp) and the fill thread (fill_thread.hpp) work on it.
#pragma once

#include "stagehand/config/config.hpp"
#include "stagehand/ipc/child.hpp"
#include "stagehand/service/cache_keeper.hpp"
#include "stagehand/service/lock_watch.hpp"
#include "stagehand/service/metrics.hpp"
#include "stagehand/service/reads.hpp"
#include "stagehand/service/registry_keeper.hpp"
#include "stagehand/service/stagings.hpp"
#include "stagehand/util/fd.hpp"
#include "stagehand/util/result.hpp"

#include <cstdint>
#include <ctime>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace stagehand::service {

// Wall-clock seconds, as the registry and GC record times.
inline std::int64_t now_s() { return static_cast<std::int64_t>(std::time(nullptr)); }

struct Node
{
  // `removal_set_aside` wakes whoever removes what the cache's keeper sets aside (the GC thread).
  Node(std::string node_name, Config initial, std::function<void()> removal_set_aside);

  // The job directories' base, opened root-safe (fixed at start: a change needs a restart).
  Result<UniqueFd> open_base() const;
  // A copy of the configuration, taken under `mutex`, for work done without it (a reload replaces it).
  Config config_now();

  // Fixed at start.
  const std::string name;
  const std::string base_path; // [tmpdir] base with %n

  // Pieces with their own locks. Lock order: `mutex` first, then a piece's own lock, never the
  // reverse: the keeper's before the registry's (eviction asks the registry which keys running
  // jobs use); the registry's and the stagings' are taken last (they call out to nothing).
  RegistryKeeper registry; // the job registry and its persistence (written soon by its saver thread, or now)
  Stagings stagings;       // running stagings, for status
  CacheKeeper keeper;      // the store in use, pins, removals, eviction (sparing what `registry` says jobs use)

  std::mutex mutex; // guards what follows, and the reads' waits
  LockWatch lock_watch{mutex}; // (unguarded) how long `mutex` has been out of reach: a holder stuck in the kernel
  Config config;    // replaced on reload
  std::optional<ipc::Credentials> service; // the service user, when the cache is usable
  Counters counters;
  ReadsUnderWay reads; // single flight: the reads under way, by key, and cache_view's claims
  std::uint32_t views_asked = 0; // cache_view requests under way: jobs starting together
  std::map<std::uint32_t, std::int64_t> viewed_jobs; // jobs that asked cache_view, and when (epoch s)

  // With `mutex`: job `job_id` asked cache_view now (no longer a job about to start with others);
  // jobs that asked more than `kept_s` ago are forgotten.
  void mark_viewed_locked(std::uint32_t job_id, std::int64_t kept_s)
  {
    const std::int64_t now = std::time(nullptr);
    std::erase_if(viewed_jobs, [&](const auto& j) { return j.second < now - kept_s; });
    viewed_jobs[job_id] = now;
  }
};

} // namespace stagehand::service
