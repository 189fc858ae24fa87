// Where config text may hold non-ASCII characters: whole-line comments only.
#include "stagehand/config/text_check.hpp"

namespace stagehand {

std::optional<TextPosition> unsafe_non_ascii(std::string_view text)
{
  const bool multiline_strings =
    text.find("\"\"\"") != std::string_view::npos || text.find("'''") != std::string_view::npos;
  TextPosition pos;
  bool comment_line = false; // this line's first non-blank character is '#'
  bool blank_so_far = true;  // only spaces and tabs so far on this line
  for (const char c : text) {
    if (c == '\n') {
      ++pos.line;
      pos.column = 1;
      comment_line = false;
      blank_so_far = true;
      continue;
    }
    if (blank_so_far && c != ' ' && c != '\t') {
      blank_so_far = false;
      comment_line = c == '#';
    }
    if (static_cast<unsigned char>(c) >= 0x80 && (multiline_strings || !comment_line)) {
      return pos;
    }
    ++pos.column;
  }
  return std::nullopt;
}

} // namespace stagehand
