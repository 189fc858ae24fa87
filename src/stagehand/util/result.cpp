// Error construction helpers.
#include "stagehand/util/result.hpp"

#include <cstring>

namespace stagehand {

Error Error::from_errno(std::string what, int err)
{
  return Error{err, what + ": " + std::strerror(err)};
}

} // namespace stagehand
