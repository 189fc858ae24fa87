// libFuzzer target: the daemon protocol parser. Arbitrary bytes go through the frame reader (in
// pieces) and every complete payload through the request and reply parsers: never a crash, an
// accepted request serialises and parses back to the same operation.
#include "stagehand/proto/frame.hpp"
#include "stagehand/proto/messages.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

using namespace stagehand::proto;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
  if (size > 70000) {
    return 0;
  }
  const char* bytes = reinterpret_cast<const char*>(data);
  auto check_payload = [](std::string_view payload) {
    auto request = parse_request(payload);
    if (request) {
      auto again = parse_request(serialize(*request));
      if (!again || std::strcmp(op_name(*again), op_name(*request)) != 0) {
        std::abort();
      }
    }
    (void)parse_reply_frame(payload);
    (void)parse_stage_reply(payload);
    (void)parse_status_reply(payload);
    (void)parse_cache_list_reply(payload);
    (void)parse_gc_reply(payload);
  };
  check_payload(std::string_view(bytes, size)); // as a payload
  FrameReader reader(k_max_request_bytes);    // as a byte stream, fed in uneven pieces
  std::size_t at = 0;
  for (std::size_t piece = 1; at < size; piece = piece * 3 + 1) {
    const std::size_t n = std::min(piece, size - at);
    if (!reader.feed(bytes + at, n)) {
      return 0;
    }
    at += n;
    while (auto payload = reader.next()) {
      check_payload(*payload);
    }
  }
  return 0;
}
