// Metrics text.
#include "stagehand/service/metrics.hpp"

#include "stagehand/fs/atomic_file.hpp"
#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/util/fd.hpp"

#include <cstdio>

namespace stagehand::service {

std::string render_metrics(const MetricsSnapshot& m)
{
  std::string out;
  const std::string node = "node=\"" + m.node + "\"";
  auto metric = [&](const char* name, const char* type, const char* help, const std::string& labels, double value) {
    char line[512];
    std::snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n%s{%s} %.17g\n", name, help, name, type, name,
                  labels.c_str(), value);
    out += line;
  };
  const auto& c = m.counters;
  metric("stagehand_cache_bytes", "gauge", "Bytes the node cache occupies on disk.", node, double(m.cache_bytes));
  metric("stagehand_cache_max_bytes", "gauge", "[daemon] cache_max_bytes.", node, double(m.cache_max_bytes));
  metric("stagehand_cache_entries", "gauge", "Entries in the node cache.", node, double(m.cache_entries));
  metric("stagehand_cache_hits_total", "counter", "Stagings served from the cache.", node, double(c.hits));
  metric("stagehand_cache_misses_total", "counter", "Stagings that read their source (and filled the cache from that read).", node, double(c.misses));
  metric("stagehand_cache_evictions_total", "counter", "Cache entries evicted.", node, double(c.evictions));
  metric("stagehand_cache_fills_dropped_total", "counter",
         "Misses delivered to their job but not cached: the cache could not keep up, or its fill failed.", node,
         double(c.fills_dropped));
  metric("stagehand_staged_bytes_total", "counter", "Bytes staged into job directories.", node,
         double(c.staged_bytes));
  metric("stagehand_staged_seconds_total", "counter", "Seconds spent staging.", node, c.staged_seconds);
  metric("stagehand_gc_runs_total", "counter", "Garbage collections run.", node, double(c.gc_runs));
  out += "# HELP stagehand_gc_removed_total Entries garbage collection removed, by reason.\n"
         "# TYPE stagehand_gc_removed_total counter\n";
  for (const char* reason : {"trash", "expired", "orphan", "stale_marker", "leftover"}) {
    auto it = c.gc_removed.find(reason);
    char line[256];
    std::snprintf(line, sizeof line, "stagehand_gc_removed_total{%s,reason=\"%s\"} %llu\n", node.c_str(), reason,
                  static_cast<unsigned long long>(it == c.gc_removed.end() ? 0 : it->second));
    out += line;
  }
  metric("stagehand_trash_backlog_entries", "gauge", "Job directories in the trash, not yet removed.", node,
         double(c.trash_entries));
  metric("stagehand_running_jobs", "gauge", "Jobs the daemon knows to run on the node.", node, double(m.running_jobs));
  metric("stagehand_stuck_children", "gauge",
         "Children that did not end after SIGKILL (blocked on a filesystem that does not answer), not yet reaped.",
         node, double(m.stuck_children));
  return out;
}

Status write_metrics_file(const std::string& path, const MetricsSnapshot& m)
{
  const auto slash = path.rfind('/');
  const std::string dir = slash == 0 ? "/" : path.substr(0, slash);
  // Root writes there: a directory a user could replace or write into (or a symlink of theirs on
  // the way) is refused, as for every directory root is configured to write in.
  auto dfd = fs::open_trusted_dir(dir, fs::CreateMissing::no);
  if (!dfd) {
    return dfd.error().with_context("[daemon] metrics_file");
  }
  return fs::write_file_atomic(dfd->get(), path.substr(slash + 1), render_metrics(m), 0644, fs::Durability::none);
}

} // namespace stagehand::service
