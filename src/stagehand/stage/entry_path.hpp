// Archive entry names, checked before anything is written: relative, no "..", bounded.
#pragma once

#include "stagehand/util/result.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace stagehand::stage {

inline constexpr std::size_t k_max_entry_path = 4096;
inline constexpr std::size_t k_max_entry_depth = 256;

// Splits an entry name into components. Leading "./" and repeated or trailing '/' are dropped;
// an absolute name, a ".." component, an empty result, a NUL byte, or a name beyond the length
// and depth limits is an error naming the entry. "." alone yields no components (the root).
Result<std::vector<std::string>> split_entry_path(std::string_view name);

} // namespace stagehand::stage
