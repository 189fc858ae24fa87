// How long a job's staging waits for the cache's side of the same read (the spool's writer on the
// cache's disk; the stream a directory's copy feeds): `grace` at first, then `share` of the
// staging's own time, all waits together. Past that the cache's side is dropped ("the node cache's
// disk could not keep up") and the job goes on alone, as staging without the daemon does.
#pragma once

#include <algorithm>
#include <chrono>

namespace stagehand::cache {

struct Patience
{
  std::chrono::milliseconds grace{200};
  double share = 0.05;

  // What is left after `waited` of `elapsed`: a further wait lengthens the staging's time too, so
  // each second of it earns `share` of itself.
  std::chrono::steady_clock::duration left(std::chrono::steady_clock::duration elapsed,
                                           std::chrono::steady_clock::duration waited) const
  {
    using Seconds = std::chrono::duration<double>;
    const double allowed = Seconds(grace).count() + Seconds(elapsed).count() * share;
    const double left = (allowed - Seconds(waited).count()) / (1.0 - std::min(share, 0.5));
    if (left <= 0) {
      return std::chrono::steady_clock::duration::zero();
    }
    return std::chrono::duration_cast<std::chrono::steady_clock::duration>(Seconds(left));
  }
};

} // namespace stagehand::cache
