// String helpers that know nothing of the product.
#pragma once

#include <string_view>
#include <vector>

namespace stagehand {

// Splits at every `sep`, keeping empty pieces ("a,,b" -> {"a", "", "b"}; "" -> {""}).
// The views point into `text`.
std::vector<std::string_view> split(std::string_view text, char sep);

} // namespace stagehand
