// A cache miss reads its source once: every byte goes to the job (a pipe to its delivery, which
// runs as the job user) and, as it passes, to a spool file in the cache's fill directory that the
// cache is filled from later, off the job's path. Runs as the service user. The job never waits
// on the cache's medium: a spool write that stalls (a slow or full disk) drops the spool, and the
// job's bytes go on.
#pragma once

#include "stagehand/archive/counters.hpp"
#include "stagehand/util/fd.hpp"
#include "stagehand/util/result.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace stagehand::cache {

inline constexpr const char* k_spool_name = "spool";

struct SpoolPolicy
{
  std::uint64_t max_bytes = 0;                    // more than this is not spooled (the cache's size)
  std::chrono::milliseconds max_stall{200};       // one spool write blocking longer drops the spool
};

struct TeeResult
{
  std::uint64_t bytes = 0;    // read from the source
  bool delivered = true;      // false: the delivery closed its pipe before the end (its own error)
  std::string spool_dropped;  // "" when the spool holds every byte; else why it was given up
};

// The daemon's word on a spool still being written, for a fill that follows it as it grows
// (shared memory: the daemon writes it once it knows, the follower reads it).
enum class SpoolState : std::uint64_t { writing = 0, complete = 1, dropped = 2 };
struct SpoolVerdict
{
  std::atomic<std::uint64_t> state{0};    // a SpoolState
  std::atomic<std::uint64_t> followed{0}; // 1 once a fill follows the spool: write it as it comes
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "SpoolVerdict lives in shared memory");

// A pipe between the read and the spool's writer: the bytes the spool lags behind the job are page
// references held in it, not copies. The writer (a thread) leaves them there while the job's copy
// needs the cores, and writes the spool once the job's copy is done (`go`), the lane is full, or a
// fill follows the spool.
struct SpoolLane
{
  int rd = -1;                           // the writer's end
  int wr = -1;                           // the read's end: tee_source closes it at the read's end
  const SpoolVerdict* verdict = nullptr; // `followed` hurries the writer (may be null)
  // Readable (a byte, or its end) once the job's copy is done: the writer's turn. The read being
  // over is not enough: an unpacking is still making its files then. -1: the read's end is.
  int go = -1;
  bool valid() const { return rd >= 0 && wr >= 0; }
};

// A lane as large as the source, at most k_lane_max, as far as the kernel gives the caller: a pipe
// is at most fs.pipe-max-size (1 MiB by default), and a user's pipes together at most
// fs.pipe-user-pages-soft pages (64 MiB by default) before new ones are refused more than a page
// or two. Made by the service user, so that it counts against that user's limits only. None
// when even a pipe cannot be made.
inline constexpr std::size_t k_lane_max = std::size_t{256} << 20;
struct LanePipe
{
  UniqueFd rd, wr;
  std::size_t bytes = 0;
};
std::optional<LanePipe> make_lane(std::uint64_t source_bytes);

// Called once the source has been read whole and the job has every byte (the spool may still be
// being written): `spool_dropped` says whether it was given up during the read.
using ReadOver = std::function<void(const TeeResult&)>;

// Reads `in_fd` (a file or a pipe) to its end, writing every byte to the pipe `deliver_fd` and to
// the file `spool_fd` (-1: no spool), through `lane` when it is valid. Uses tee(2)/splice(2) where
// the kernel can (no copy through this process), read/write where it cannot. SIGPIPE is ignored
// from here on. `counters->bytes` follows the bytes read. `read_over` is called before the spool is
// finished; the result is the spool's end. An error is a read of the source failing.
Result<TeeResult> tee_source(int in_fd, int deliver_fd, int spool_fd, const SpoolPolicy& policy,
                             archive::WorkCounters* counters = nullptr, SpoolLane lane = {},
                             const ReadOver& read_over = {});

// Copies the spool `k_spool_name` in `dir_fd` to `out_fd` (a pipe to the fill's unpacking) as it
// is written: at its end it waits (polling) for more or for the verdict. `complete`: what is left
// is copied and the copy ends (Ok). `dropped`, or the spool never appearing before the verdict:
// an error. A reader gone from `out_fd` (EPIPE) ends the copy with an error too.
Status follow_spool(int dir_fd, int out_fd, const SpoolVerdict& verdict);

} // namespace stagehand::cache
