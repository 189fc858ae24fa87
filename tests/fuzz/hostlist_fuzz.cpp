// libFuzzer target: expand_hostlist on arbitrary bytes must never crash, hang or exceed its
// limits, and what it accepts must be self-consistent.
#include "stagehand/ddp/hostlist.hpp"

#include <cstdint>
#include <cstdlib>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
  if (size > 4096) {
    return 0;
  }
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto hosts = stagehand::ddp::expand_hostlist(text);
  auto first = stagehand::ddp::first_host(text);
  if (hosts) {
    if (hosts->empty() || hosts->size() > stagehand::ddp::k_max_hosts || !first || *first != hosts->front()) {
      std::abort();
    }
    for (const auto& h : *hosts) {
      if (h.empty() && text.find('[') == std::string_view::npos) {
        std::abort();
      }
      if (h.find_first_of("[],") != std::string::npos) {
        std::abort();
      }
    }
  }
  return 0;
}
