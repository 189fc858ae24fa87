#include "stagehand/cache/stage_plan.hpp"

#include <algorithm>

namespace stagehand::cache {

SourceStep next_source_step(const SourceSituation& s)
{
  if (s.cached) {
    return SourceStep::hit;
  }
  if (s.read_under_way && s.attempt < k_max_waits) {
    return SourceStep::wait_for_read;
  }
  if (s.report_misses && s.kind == stage::SourceKind::file && !s.delivered_copy) {
    return SourceStep::report_absent;
  }
  return SourceStep::read;
}

WaitStep next_wait_step(const ReadProgress& r, Clock::time_point now, Clock::duration stall_limit)
{
  if (r.done) {
    return WaitStep::look_again;
  }
  if (!r.spool_ready) {
    return now - r.progressed > stall_limit ? WaitStep::stalled : WaitStep::wait_for_read;
  }
  return now < r.patience_until ? WaitStep::wait_for_entry : WaitStep::deliver_from_spool;
}

Clock::time_point entry_patience(Clock::time_point now, std::chrono::milliseconds read_time)
{
  return now + read_time + std::chrono::seconds(1);
}

std::string uncached_before_read(const SourceIdentity& id, const struct timespec& started,
                                 std::uint64_t cache_max_bytes)
{
  if (changed_near(id, started)) {
    return "source modified during or just before staging";
  }
  if (id.bytes > cache_max_bytes) {
    return "larger than the node cache";
  }
  return "";
}

std::string uncached_after_read(bool changed, const std::string& dropped)
{
  if (changed) {
    return "source modified during or just before staging";
  }
  if (!dropped.empty()) {
    return "not cached: " + dropped;
  }
  return "";
}

bool fill_follows_spool(bool plain_file, bool zip) { return !plain_file && !zip; }

TreeDelivery tree_delivery(const SourceIdentity& id)
{
  const std::uint64_t mean = id.files == 0 ? 0 : id.bytes / id.files;
  return mean >= k_reader_copies_from ? TreeDelivery::reader_copies : TreeDelivery::unpacked_from_stream;
}

FillStart lone_fill_start(const FillRoom& r)
{
  if (r.job_waits || r.held >= k_fill_hold_max) {
    return FillStart::now;
  }
  const double room = std::min(r.cpus, 2U) - 0.25;
  return r.cpus > 0 && r.idle_cpus >= room ? FillStart::now : FillStart::hold;
}

} // namespace stagehand::cache
