// String helpers.
#include "stagehand/util/strings.hpp"

namespace stagehand {

std::vector<std::string_view> split(std::string_view text, char sep)
{
  std::vector<std::string_view> out;
  std::size_t start = 0;
  for (;;) {
    std::size_t at = text.find(sep, start);
    if (at == std::string_view::npos) {
      out.push_back(text.substr(start));
      return out;
    }
    out.push_back(text.substr(start, at - start));
    start = at + 1;
  }
}

std::string join(const std::vector<std::string>& parts, std::string_view sep)
{
  std::string out;
  for (const auto& p : parts) {
    append_joined(out, sep, p);
  }
  return out;
}

void append_joined(std::string& out, std::string_view sep, std::string_view piece)
{
  if (!out.empty()) {
    out += sep;
  }
  out += piece;
}

} // namespace stagehand
