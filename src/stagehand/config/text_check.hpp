// A check on config text before the TOML parser sees it.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

namespace stagehand {

struct TextPosition
{
  std::size_t line = 1;   // 1-based
  std::size_t column = 1; // 1-based, in bytes
};

// The position of the first non-ASCII byte outside a string or comment, if any. TOML allows
// non-ASCII characters only in strings and comments, and toml++ 3.3 reaches
// __builtin_unreachable (undefined behaviour) on some of them elsewhere (U+00A1..U+0499 after a
// table name, found by tests/fuzz/config_fuzz.cpp): the loader refuses such text itself.
std::optional<TextPosition> non_ascii_outside_strings(std::string_view text);

} // namespace stagehand
