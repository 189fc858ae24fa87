// Escaping control characters for logs.
#include "stagehand/util/escape.hpp"

namespace stagehand {

std::string escape_control(std::string_view text)
{
  std::string out;
  out.reserve(text.size());
  static constexpr char k_hex[] = "0123456789abcdef";
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
    case '\n': out += "\\n"; break;
    case '\r': out += "\\r"; break;
    case '\t': out += "\\t"; break;
    case '\\': out += "\\\\"; break;
    default:
      if (c < 0x20 || c == 0x7f) {
        out += "\\x";
        out += k_hex[c >> 4];
        out += k_hex[c & 0xf];
      } else {
        out += ch;
      }
    }
  }
  return out;
}

} // namespace stagehand
