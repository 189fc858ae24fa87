// Archive entry names, checked before anything is written: relative, no "..", bounded.
#pragma once

#include "stagehand/util/result.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace stagehand::archive {

inline constexpr std::size_t k_max_entry_path = 4096;
// Deep enough for any real dataset (a directory staged through the daemon travels as a tar stream:
// a 500-deep chain must pass), shallow enough to stop nesting bombs.
inline constexpr std::size_t k_max_entry_depth = 1024;

// Splits an entry name into components. Leading "./" and repeated or trailing '/' are dropped;
// an absolute name, a ".." component, an empty result, a NUL byte, or a name beyond the length
// and depth limits is an error naming the entry. "." alone yields no components (the root).
Result<std::vector<std::string>> split_entry_path(std::string_view name);

} // namespace stagehand::archive
