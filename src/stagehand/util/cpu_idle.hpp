// How many of the node's CPUs sat idle over a while, as the kernel counts CPU time (/proc/stat's
// text, which stagehandd's fill thread reads before a lone miss's fill takes cores a job may need).
#pragma once

#include "stagehand/util/result.hpp"

#include <cstdint>
#include <string_view>

namespace stagehand {

// The whole node's CPU time so far, in clock ticks: idle (with iowait) and in all, and how many
// CPUs count it.
struct CpuTimes
{
  std::uint64_t idle = 0;
  std::uint64_t total = 0;
  unsigned cpus = 0;
};

// /proc/stat's text: the "cpu" line's sums and the number of "cpuN" lines.
Result<CpuTimes> parse_proc_stat(std::string_view text);

// The CPUs idle on average between two samples (0 when no tick passed).
double idle_cpus(const CpuTimes& before, const CpuTimes& after);

} // namespace stagehand
