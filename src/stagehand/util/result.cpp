// Error construction helpers.
#include "stagehand/util/result.hpp"

#include <cstring>

namespace stagehand {

const char* kind_name(ErrorKind kind)
{
  switch (kind) {
  case ErrorKind::refused:
    return "refused";
  case ErrorKind::limit:
    return "limit";
  case ErrorKind::corrupt:
    return "corrupt";
  case ErrorKind::io:
    return "io";
  case ErrorKind::config:
    return "config";
  case ErrorKind::internal:
    return "internal";
  }
  return "internal";
}

std::optional<ErrorKind> kind_from_name(std::string_view name)
{
  for (ErrorKind k : k_error_kinds) {
    if (name == kind_name(k)) {
      return k;
    }
  }
  return std::nullopt;
}

Error Error::from_errno(std::string what, int err)
{
  return Error{ErrorKind::io, err, what + ": " + std::strerror(err)};
}

Error Error::with_context(std::string_view prefix) const
{
  Error e = *this;
  if (prefix.empty()) {
    return e;
  }
  std::string head = std::string(prefix) + ": ";
  if (!std::string_view(e.message).starts_with(head)) {
    e.message = head + e.message;
  }
  return e;
}

} // namespace stagehand
