// A small TOML lexer that knows only comments and the four kinds of string.
#include "stagehand/config/text_check.hpp"

namespace stagehand {

std::optional<TextPosition> non_ascii_outside_strings(std::string_view text)
{
  enum class In { code, comment, basic, literal, ml_basic, ml_literal };
  In in = In::code;
  TextPosition pos;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    const std::string_view rest = text.substr(i);
    switch (in) {
    case In::code:
      if (static_cast<unsigned char>(c) >= 0x80) {
        return pos;
      }
      if (c == '#') {
        in = In::comment;
      } else if (rest.starts_with("\"\"\"")) {
        in = In::ml_basic;
        i += 2;
        pos.column += 2;
      } else if (rest.starts_with("'''")) {
        in = In::ml_literal;
        i += 2;
        pos.column += 2;
      } else if (c == '"') {
        in = In::basic;
      } else if (c == '\'') {
        in = In::literal;
      }
      break;
    case In::comment:
      if (c == '\n') {
        in = In::code;
      }
      break;
    case In::basic:
    case In::ml_basic:
      if (c == '\\' && i + 1 < text.size() && text[i + 1] != '\n') {
        ++i; // the escaped character (a newline after a backslash is counted below)
        ++pos.column;
      } else if (in == In::basic && (c == '"' || c == '\n')) {
        in = In::code;
      } else if (in == In::ml_basic && rest.starts_with("\"\"\"")) {
        in = In::code;
        i += 2;
        pos.column += 2;
      }
      break;
    case In::literal:
      if (c == '\'' || c == '\n') {
        in = In::code;
      }
      break;
    case In::ml_literal:
      if (rest.starts_with("'''")) {
        in = In::code;
        i += 2;
        pos.column += 2;
      }
      break;
    }
    if (text[i] == '\n') {
      ++pos.line;
      pos.column = 1;
    } else {
      ++pos.column;
    }
  }
  return std::nullopt;
}

} // namespace stagehand
