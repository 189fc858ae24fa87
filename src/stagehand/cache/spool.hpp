// A cache miss reads its source once: every byte goes to the job (a pipe to its delivery, which
// runs as the job user) and, as it passes, to a spool file in the cache's fill directory that the
// cache is filled from later, off the job's path. Runs as the service user. The job never waits
// on the cache's medium: the spool is written by a thread of its own, which a read that delivers
// waits for only so long (a slow or full disk, or one that throttles a large source's writes,
// then drops the spool), and the job's bytes go on.
#pragma once

#include "stagehand/archive/counters.hpp"
#include "stagehand/cache/patience.hpp"
#include "stagehand/util/result.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace stagehand::cache {

inline constexpr const char* k_spool_name = "spool";

struct SpoolPolicy
{
  std::uint64_t max_bytes = 0; // more than this is not spooled (the cache's size)
  // How long a read that delivers waits for the spool's writer, all waits together; and, delivery
  // or not, one spool write blocking longer than patience.grace drops the spool.
  Patience patience;
};

struct TeeResult
{
  std::uint64_t bytes = 0;    // read from the source
  bool delivered = true;      // false: the delivery closed its pipe before the end (its own error)
  std::string spool_dropped;  // "" when the spool holds every byte; else why it was given up
};

// Reads `in_fd` (a file or a pipe) to its end, writing every byte to the pipe `deliver_fd` and to
// the file `spool_fd` (-1: no spool). Uses tee(2)/splice(2) where the kernel can (no copy through
// this process), read/write where it cannot. SIGPIPE is ignored from here on. `counters->bytes`
// follows the bytes read. An error is a read of the source failing (the spool dropped, the
// delivery's pipe left open). Where the spool has a writer thread, the delivery's pipe is closed
// at the source's end (`deliver_fd` then refers to /dev/null), before the writer's last bytes.
Result<TeeResult> tee_source(int in_fd, int deliver_fd, int spool_fd, const SpoolPolicy& policy,
                             archive::WorkCounters* counters = nullptr);

// The daemon's word on a spool still being written, for a fill that follows it as it grows
// (shared memory: the daemon writes it once it knows, the follower reads it).
enum class SpoolState : std::uint64_t { writing = 0, complete = 1, dropped = 2 };
struct SpoolVerdict
{
  std::atomic<std::uint64_t> state{0}; // a SpoolState
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "SpoolVerdict lives in shared memory");

// Copies the spool `k_spool_name` in `dir_fd` to `out_fd` (a pipe to the fill's unpacking) as it
// is written: at its end it waits (polling) for more or for the verdict. `complete`: what is left
// is copied and the copy ends (Ok). `dropped`, or the spool never appearing before the verdict:
// an error. A reader gone from `out_fd` (EPIPE) ends the copy with an error too.
Status follow_spool(int dir_fd, int out_fd, const SpoolVerdict& verdict);

} // namespace stagehand::cache
