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

// The position of the first non-ASCII byte that is not in a whole-line comment (a line whose
// first non-blank character is '#'), if any; in a text with a multi-line string (""" or ''')
// the first non-ASCII byte anywhere. toml++ 3.3 reaches __builtin_unreachable (undefined
// behaviour) when it asks whether certain non-ASCII characters are whitespace (U+00A1..U+0499,
// U+2C6E..U+3067, U+FB36..U+FEFE), outside strings and also inside a multi-line string after a
// line-ending backslash (found by tests/fuzz/config_fuzz.cpp). A site config is paths, sizes and
// names: the loader refuses such text itself rather than guess what toml++ would look at.
std::optional<TextPosition> unsafe_non_ascii(std::string_view text);

} // namespace stagehand
