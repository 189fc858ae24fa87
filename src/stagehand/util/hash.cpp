// Hex formatting for the hashes.
#include "stagehand/util/hash.hpp"

#include <cstdio>

namespace stagehand {

std::string to_hex(std::uint64_t v, int digits)
{
  char buf[24];
  std::snprintf(buf, sizeof buf, "%0*llx", digits, static_cast<unsigned long long>(v));
  return buf;
}

} // namespace stagehand
