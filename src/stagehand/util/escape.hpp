// Control characters made visible, for text that ends up in a log line.
#pragma once

#include <string>
#include <string_view>

namespace stagehand {

// `text` with every ASCII control character (and DEL) written as an escape: \n, \r, \t, \\ for a
// backslash, \xHH for the rest. A path that holds a newline then stays on its log line instead of
// forging the next one; bytes >= 0x80 (UTF-8) are kept.
std::string escape_control(std::string_view text);

} // namespace stagehand
