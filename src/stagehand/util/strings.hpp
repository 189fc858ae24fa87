// String helpers that know nothing of the product.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace stagehand {

// Splits at every `sep`, keeping empty pieces ("a,,b" -> {"a", "", "b"}; "" -> {""}).
// The views point into `text`.
std::vector<std::string_view> split(std::string_view text, char sep);

// The pieces with `sep` between them ({} -> "", {"a"} -> "a", {"a", "b"} -> "a/b" for "/").
std::string join(const std::vector<std::string>& parts, std::string_view sep);

// Appends `piece` to `out`, with `sep` first unless `out` is empty (joining as one goes).
void append_joined(std::string& out, std::string_view sep, std::string_view piece);

} // namespace stagehand
