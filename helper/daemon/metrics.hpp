// Prometheus text-format metrics, written atomically for node_exporter's textfile collector.
#pragma once

#include "daemon.hpp"

#include <string>

namespace stagehand::daemon {

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

} // namespace stagehand::daemon
