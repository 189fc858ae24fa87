// Prometheus text-format metrics, written atomically for node_exporter's textfile collector.
#pragma once

#include "stagehand/util/result.hpp"

#include <cstdint>
#include <map>
#include <string>

namespace stagehand::service {

// What stagehandd counted since it started.
struct Counters
{
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t evictions = 0; // counted by CacheKeeper (evictions()), copied in for a snapshot
  std::uint64_t staged_bytes = 0;
  double staged_seconds = 0;
  std::uint64_t gc_runs = 0;
  std::map<std::string, std::uint64_t> gc_removed; // by reason
  std::uint64_t trash_entries = 0;                 // at the last look
  std::uint64_t fills_dropped = 0; // misses delivered but not cached: the spool could not keep up, a fill failed
};

struct MetricsSnapshot
{
  std::string node;
  Counters counters;
  std::uint64_t cache_entries = 0;
  std::uint64_t cache_bytes = 0;
  std::uint64_t cache_max_bytes = 0;
  std::uint64_t running_jobs = 0;
  std::uint64_t stuck_children = 0; // outlived SIGKILL, not yet reaped (util/process_wait.hpp)
};

std::string render_metrics(const MetricsSnapshot& m);
// Written in its directory opened with fs::open_trusted_dir (root-owned all the way, not writable
// by others): root never writes through a directory a user controls.
Status write_metrics_file(const std::string& path, const MetricsSnapshot& m);

} // namespace stagehand::service
