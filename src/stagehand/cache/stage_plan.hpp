// The node cache's decisions for one source of a staging request, as pure functions (the daemon
// wires them to its lock, children and sockets; stage_plan_test holds them to tables):
// - hit, wait for another job's read of it, report it unread, or read it (single flight);
// - what a job waiting on another job's read does next;
// - whether a miss's one read may fill the cache (before the read and after it), and when its fill
//   starts.
#pragma once

#include "stagehand/cache/key.hpp"
#include "stagehand/stage/kinds.hpp"

#include <chrono>
#include <ctime>
#include <string>

namespace stagehand::cache {

using Clock = std::chrono::steady_clock;

// What a staging request does with a source now.
enum class SourceStep {
  hit,           // the cache holds it: placed from the entry
  wait_for_read, // another job reads it on this node: wait for its entry, or deliver from its spool
  report_absent, // not read: the job would rather broadcast it (misses = report), nothing made
  read,          // this request reads it (a miss): the others wait for it
};

struct SourceSituation
{
  bool cached = false;          // an entry (the shared one, or this user's from a broadcast's copy)
  bool read_under_way = false;  // another request reads the same entry's source now
  int attempt = 0;              // how often this request looked already (waits that ended in nothing)
  bool report_misses = false;   // the request asked to have misses reported, not read
  stage::SourceKind kind = stage::SourceKind::file;
  bool delivered_copy = false;  // the broadcast's copy of a file source is there to read
};

// After 3 waits that ended without an entry or a spool, a request reads the source itself.
inline constexpr int k_max_waits = 3;

SourceStep next_source_step(const SourceSituation& s);

// What a request waiting on another job's read sees of it.
struct ReadProgress
{
  bool done = false;        // the read ended: published (a hit now) or failed (read it yourself)
  bool spool_ready = false; // the spool holds the whole source; the entry is being made from it
  Clock::time_point progressed;     // when its bytes last moved
  Clock::time_point patience_until; // with spool_ready: how long to wait for the entry
};

enum class WaitStep {
  look_again,         // the read is over: look the source up again (a hit, or read it)
  stalled,            // no progress for the stall limit: give up with an error
  wait_for_read,      // keep waiting for the read (a progress line every keepalive)
  wait_for_entry,     // the spool is whole: wait for its entry until patience runs out
  deliver_from_spool, // patience ran out: deliver from the spool (a local file, no second read)
};

WaitStep next_wait_step(const ReadProgress& r, Clock::time_point now, Clock::duration stall_limit);

// Patience for an entry once the spool is whole: about as long as the read took (a cache that
// keeps up fills in that time) and a second; past that, delivering from the spool is cheaper than
// waiting on a slow cache disk.
Clock::time_point entry_patience(Clock::time_point now, std::chrono::milliseconds read_time);

// Before a miss's read: why it must not fill the cache ("" = it may): a source changed during or
// just before it was identified, or one larger than the whole cache.
std::string uncached_before_read(const SourceIdentity& id, const struct timespec& started,
                                 std::uint64_t cache_max_bytes);

// After the read: why its spool must not become an entry ("" = it may): the source changed while
// it was read, or the spool was dropped (`dropped` says why: the cache could not keep up).
std::string uncached_after_read(bool changed, const std::string& dropped);

// Whether a fill follows the spool as it is written (an archive or a directory's tar stream are
// unpacked as they come; a zip is read whole first; a plain file's spool is its entry as it is).
bool fill_follows_spool(bool plain_file, bool zip);

// How a directory's miss reaches the job. Large files (a mean of k_reader_copies_from and up):
// the job user's reader copies each into the job's directory itself and tees the same pages to
// the cache's stream (one process, no copy through it). Small files: the reader streams the tar
// and a delivery unpacks it with its writer threads beside the reader, which beats a copy done
// file by file in one process.
enum class TreeDelivery { reader_copies, unpacked_from_stream };
inline constexpr std::uint64_t k_reader_copies_from = 256U << 10;
TreeDelivery tree_delivery(const SourceIdentity& id);

// When a lone miss's fill (no job waits for its entry) starts, once its job has the data: that job
// is still winding its step down or starting its work, and the fill's unpacking would take the
// cores they need on a small node. It starts once the node's CPUs have room for an unpacking beside
// the jobs (two idle, or all of a smaller node's less a quarter, over the last look); at once when a
// job waits for the entry; and after k_fill_hold_max since its spool was whole, whatever the load:
// on a node that stays busy the cache must still fill.
inline constexpr std::chrono::seconds k_fill_hold_max{5};
enum class FillStart { now, hold };
struct FillRoom
{
  double idle_cpus = 0; // on average over the last look (util/cpu_idle)
  unsigned cpus = 0;    // the node's
  Clock::duration held{};
  bool job_waits = false;
};
FillStart lone_fill_start(const FillRoom& r);

} // namespace stagehand::cache
