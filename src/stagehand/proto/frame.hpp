// Framing of the daemon protocol: a 4-byte big-endian length, then that many bytes of JSON.
// Pure: no sockets. The reader refuses frames over its limit before buffering them.
#pragma once

#include "stagehand/util/result.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace stagehand::proto {

inline constexpr std::size_t k_max_request_bytes = 64U << 10;  // a request frame's payload
inline constexpr std::size_t k_max_response_bytes = 32U << 20; // a reply frame's payload

// The header and payload of one frame.
std::string encode_frame(std::string_view payload);

// Accumulates bytes and cuts them into frames.
class FrameReader
{
public:
  explicit FrameReader(std::size_t max_payload) : m_max(max_payload) {}

  // Adds bytes; an error (a declared length over the limit) is final.
  Status feed(const char* data, std::size_t len);

  // The next complete payload, if one is buffered.
  std::optional<std::string> next();

  // Bytes buffered towards an incomplete frame (0 between frames).
  std::size_t pending() const { return m_buf.size(); }

  // How many more bytes complete the next frame's header, else its payload (0: a frame is
  // complete): a reader that reads no more than this never takes bytes of the frame after it.
  std::size_t missing() const;

private:
  std::size_t m_max;
  std::string m_buf;
  bool m_failed = false;
};

} // namespace stagehand::proto
