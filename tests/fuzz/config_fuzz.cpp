// libFuzzer target: the config loader (TOML text to Config, every key checked) on arbitrary
// bytes never crashes; a config that loads has a valid shape.
#include "stagehand/config/config.hpp"

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
  if (size > 16384) {
    return 0;
  }
  std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    auto config = stagehand::parse_config(text, "fuzz.toml");
    if (config) {
      (void)stagehand::expand_node(config->daemon.socket, "node1");
    }
  } catch (...) {
    std::abort(); // the loader returns errors as values
  }
  return 0;
}
