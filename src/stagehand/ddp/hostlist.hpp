// Expansion of Slurm host lists ("gpu[01-04,07],login1", "rack[1-2]-n[01-02]").
#pragma once

#include "stagehand/util/result.hpp"

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace stagehand::ddp {

inline constexpr std::size_t k_max_hosts = 1U << 20; // a node list longer than this is refused

// Expands a host list the way Slurm does since 23.11: comma-separated expressions, each a name
// with any number of bracket groups of comma-separated numbers and ranges (a range keeps the zero
// padding of its lower bound), text allowed between and after the groups ("x[3-4]-y" is x3-y,
// x4-y). Slurm 22.05 refuses text after the last group, so a 22.05 slurmctld never hands out
// such a list and accepting it costs 22.05 sites nothing. A stray ']', which 23.11 takes as
// text, is refused: no host name holds one. Several groups expand as a product in Slurm's order
// (for two groups, the first outermost). Order and duplicates are kept. A pure function: no
// Slurm, no DNS.
Result<std::vector<std::string>> expand_hostlist(std::string_view list);

// The first host of a list without expanding the rest.
Result<std::string> first_host(std::string_view list);

} // namespace stagehand::ddp
