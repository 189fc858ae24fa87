// FNV-1a: a small, stable, non-cryptographic hash for names that must be the same in every
// process and every version (marker file names, environment markers).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace stagehand {

// FNV-1a over `s`, 32 or 64 bits wide (H = std::uint32_t or std::uint64_t).
template<typename H> constexpr H fnv1a(std::string_view s)
{
  static_assert(std::is_same_v<H, std::uint32_t> || std::is_same_v<H, std::uint64_t>);
  constexpr H basis = sizeof(H) == 4 ? H(2166136261U) : H(14695981039346656037ULL);
  constexpr H prime = sizeof(H) == 4 ? H(16777619U) : H(1099511628211ULL);
  H h = basis;
  for (unsigned char c : s) {
    h = static_cast<H>((h ^ c) * prime);
  }
  return h;
}

// `v` as lower-case hex, zero-padded to `digits`.
std::string to_hex(std::uint64_t v, int digits);

} // namespace stagehand
