// --tmpdir argument grammar.
#include "stagehand/tmpdir/option.hpp"

#include <string>

namespace stagehand::tmpdir {

Result<Request> parse_option(const char* arg)
{
  std::string_view v = arg ? arg : "";
  if (v.empty() || v == "(null)") {
    return Request::create;
  }
  if (v == "keep") {
    return Request::keep;
  }
  return Error::refused("--tmpdir: unknown value \"" + std::string(v) + "\" (expected no value, or --tmpdir=keep)");
}

} // namespace stagehand::tmpdir
