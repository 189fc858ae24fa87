// Length-prefixed frames.
#include "stagehand/proto/frame.hpp"

namespace stagehand::proto {

namespace {

std::uint32_t read_len(const std::string& buf)
{
  return (std::uint32_t(static_cast<unsigned char>(buf[0])) << 24) |
         (std::uint32_t(static_cast<unsigned char>(buf[1])) << 16) |
         (std::uint32_t(static_cast<unsigned char>(buf[2])) << 8) | std::uint32_t(static_cast<unsigned char>(buf[3]));
}

} // namespace

std::string encode_frame(std::string_view payload)
{
  const auto n = static_cast<std::uint32_t>(payload.size());
  std::string out;
  out.reserve(4 + payload.size());
  out += static_cast<char>(n >> 24);
  out += static_cast<char>(n >> 16);
  out += static_cast<char>(n >> 8);
  out += static_cast<char>(n);
  out += payload;
  return out;
}

Status FrameReader::feed(const char* data, std::size_t len)
{
  if (m_failed) {
    return Error::refused("protocol: stream already failed");
  }
  m_buf.append(data, len);
  if (m_buf.size() >= 4 && read_len(m_buf) > m_max) {
    m_failed = true;
    m_buf.clear();
    return Error::limit("protocol: frame larger than " + std::to_string(m_max) + " bytes");
  }
  return ok_status();
}

std::size_t FrameReader::missing() const
{
  if (m_buf.size() < 4) {
    return 4 - m_buf.size();
  }
  const std::size_t whole = 4 + std::size_t(read_len(m_buf));
  return whole > m_buf.size() ? whole - m_buf.size() : 0;
}

std::optional<std::string> FrameReader::next()
{
  if (m_failed || m_buf.size() < 4) {
    return std::nullopt;
  }
  const std::uint32_t n = read_len(m_buf);
  if (m_buf.size() < 4 + std::size_t(n)) {
    return std::nullopt;
  }
  std::string payload = m_buf.substr(4, n);
  m_buf.erase(0, 4 + std::size_t(n));
  if (m_buf.size() >= 4 && read_len(m_buf) > m_max) {
    m_failed = true;
    m_buf.clear();
  }
  return payload;
}

} // namespace stagehand::proto
