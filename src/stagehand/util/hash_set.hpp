// A set of 64-bit hashes: open addressing, linear probing, one flat array. For the extractor's
// "was this path queued?" question, asked for every entry of archives of millions of entries:
// no allocation per insert, one cache line per lookup. 0 is stored as 1 (a hash collision costs
// a caller only a needless wait, never a wrong answer the other way). Slots are chosen with a
// random key per set: names crafted to pile up in one run of slots (and make every probe walk
// it) cannot be made in advance.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <algorithm>
#include <vector>

namespace stagehand {

class HashSet
{
public:
  HashSet() : m_key((static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}()) {}

  void insert(std::uint64_t h)
  {
    if ((m_size + 1) * 2 > m_slots.size()) {
      grow();
    }
    if (place(m_slots, fix(h), m_key)) {
      ++m_size;
    }
  }

  bool contains(std::uint64_t h) const
  {
    if (m_size == 0) {
      return false;
    }
    h = fix(h);
    const std::size_t mask = m_slots.size() - 1;
    for (std::size_t i = mix(h ^ m_key) & mask;; i = (i + 1) & mask) {
      if (m_slots[i] == h) {
        return true;
      }
      if (m_slots[i] == 0) {
        return false;
      }
    }
  }

  std::size_t size() const { return m_size; }
  bool empty() const { return m_size == 0; }

  // Forgets everything; keeps the array unless it grew past `keep_slots`.
  void clear(std::size_t keep_slots = 1U << 16)
  {
    if (m_slots.size() > keep_slots) {
      m_slots = {};
    } else {
      std::fill(m_slots.begin(), m_slots.end(), 0);
    }
    m_size = 0;
  }

private:
  static std::uint64_t fix(std::uint64_t h) { return h == 0 ? 1 : h; }
  // The slot index from the hash's high bits mixed down (the caller's hash may be weak below).
  static std::size_t mix(std::uint64_t h) { return static_cast<std::size_t>((h * 0x9E3779B97F4A7C15ULL) >> 17); }

  static bool place(std::vector<std::uint64_t>& slots, std::uint64_t h, std::uint64_t key)
  {
    const std::size_t mask = slots.size() - 1;
    for (std::size_t i = mix(h ^ key) & mask;; i = (i + 1) & mask) {
      if (slots[i] == h) {
        return false;
      }
      if (slots[i] == 0) {
        slots[i] = h;
        return true;
      }
    }
  }

  void grow()
  {
    std::vector<std::uint64_t> bigger(m_slots.empty() ? 1024 : m_slots.size() * 2, 0);
    for (std::uint64_t h : m_slots) {
      if (h != 0) {
        place(bigger, h, m_key);
      }
    }
    m_slots.swap(bigger);
  }

  std::uint64_t m_key;
  std::vector<std::uint64_t> m_slots; // 0: empty; size a power of two, at most half full
  std::size_t m_size = 0;
};

} // namespace stagehand
