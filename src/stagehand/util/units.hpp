// Parsing of the sizes ("2T") and durations ("24h") used in the config file.
#pragma once

#include "stagehand/util/result.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace stagehand {

// Bytes, with an optional K/M/G/T suffix (powers of 1024) and an optional trailing "B"/"iB".
Result<std::uint64_t> parse_size(std::string_view text);

// The longest duration a setting has: 100 years (a point in time that far on is still a
// steady_clock's and an epoch second's, in nanoseconds). A longer one counts as this.
inline constexpr std::chrono::seconds k_max_duration{36500LL * 86400};

// Seconds, with an optional s/m/h/d suffix; a bare number is seconds. At most k_max_duration.
Result<std::chrono::seconds> parse_duration(std::string_view text);

// "117.2 MiB": bytes for people (powers of 1024, one decimal; "0 B" .. "1023 B" without one).
std::string human_bytes(std::uint64_t bytes);

// A whole decimal uint32 ("42"); nothing else accepted (no sign, space or suffix).
std::optional<std::uint32_t> parse_u32(std::string_view text);

} // namespace stagehand
