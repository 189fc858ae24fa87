// A cache miss reads its source once: every byte goes to the job (a pipe to its delivery, which
// runs as the job user) and, as it passes, to a spool file in the cache's fill directory that the
// cache is filled from later, off the job's path. Runs as the service user. The job never waits
// on the cache's medium: a spool write that stalls (a slow or full disk) drops the spool, and the
// job's bytes go on.
#pragma once

#include "stagehand/stage/counters.hpp"
#include "stagehand/util/result.hpp"

#include <chrono>
#include <cstdint>
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

// Reads `in_fd` (a file or a pipe) to its end, writing every byte to the pipe `deliver_fd` and to
// the file `spool_fd` (-1: no spool). Uses tee(2)/splice(2) where the kernel can (no copy through
// this process), read/write where it cannot. SIGPIPE is ignored from here on. `counters->bytes`
// follows the bytes read. An error is a read of the source failing.
Result<TeeResult> tee_source(int in_fd, int deliver_fd, int spool_fd, const SpoolPolicy& policy,
                             stage::WorkCounters* counters = nullptr);

} // namespace stagehand::cache
