// The --tmpdir[=keep] option value.
#pragma once

#include "stagehand/util/result.hpp"

#include <string_view>

namespace stagehand::tmpdir {

enum class Request { none, create, keep };

// Parses the option's argument: absent/empty (or Slurm's literal "(null)") is `create`,
// "keep" is `keep`; anything else is an error naming the value.
Result<Request> parse_option(const char* arg);

} // namespace stagehand::tmpdir
