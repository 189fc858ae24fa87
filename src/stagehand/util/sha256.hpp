// SHA-256 (FIPS 180-4), for cache keys that a user must not be able to collide on purpose.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace stagehand {

class Sha256
{
public:
  Sha256();
  void update(const void* data, std::size_t len);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // Appends a length-prefixed field, so that ("ab","c") and ("a","bc") hash differently.
  void field(std::string_view s);
  void field_u64(std::uint64_t v);
  std::array<std::uint8_t, 32> digest();
  std::string hex_digest();

private:
  void block(const std::uint8_t* p);

  std::array<std::uint32_t, 8> m_h;
  std::array<std::uint8_t, 64> m_buf{};
  std::size_t m_buf_len = 0;
  std::uint64_t m_total = 0;
};

std::string sha256_hex(std::string_view data);

} // namespace stagehand
