// libFuzzer target: the option grammar (--tmpdir[=keep], --ddp-env=MODE) and size/duration
// values on arbitrary bytes never crash; what parses is one of the documented values.
#include "stagehand/ddp/env.hpp"
#include "stagehand/tmpdir/option.hpp"
#include "stagehand/util/units.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
  if (size > 1024) {
    return 0;
  }
  const std::string text(reinterpret_cast<const char*>(data), size); // stops at a NUL, as argv does
  (void)stagehand::tmpdir::parse_option(text.c_str());
  (void)stagehand::ddp::parse_mode(text.c_str());
  (void)stagehand::parse_size(text);
  (void)stagehand::parse_u32(text);
  return 0;
}
