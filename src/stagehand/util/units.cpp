// Size and duration parsing with overflow checks.
#include "stagehand/util/units.hpp"

#include <cstdio>

#include <charconv>
#include <limits>
#include <string>

namespace stagehand {

namespace {

struct NumberAndSuffix
{
  std::uint64_t number = 0;
  std::string_view suffix;
};

Result<NumberAndSuffix> split_number(std::string_view text, std::string_view what)
{
  while (!text.empty() && text.front() == ' ') {
    text.remove_prefix(1);
  }
  while (!text.empty() && text.back() == ' ') {
    text.remove_suffix(1);
  }
  NumberAndSuffix out;
  const auto* first = text.data();
  const auto* last = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(first, last, out.number);
  if (ec == std::errc::result_out_of_range) {
    return Error::refused(std::string(what) + " \"" + std::string(text) + "\" is too large");
  }
  if (ec != std::errc() || ptr == first) {
    return Error::refused("bad " + std::string(what) + " \"" + std::string(text) + "\"");
  }
  out.suffix = std::string_view(ptr, static_cast<std::size_t>(last - ptr));
  return out;
}

Result<std::uint64_t> scale(std::uint64_t number, std::uint64_t factor, std::string_view text,
                            std::string_view what)
{
  if (factor != 0 && number > std::numeric_limits<std::uint64_t>::max() / factor) {
    return Error::refused(std::string(what) + " \"" + std::string(text) + "\" is too large");
  }
  return number * factor;
}

} // namespace

Result<std::uint64_t> parse_size(std::string_view text)
{
  auto parts = split_number(text, "size");
  if (!parts) {
    return parts.error();
  }
  std::string_view suffix = parts->suffix;
  if (suffix.ends_with("iB")) {
    suffix.remove_suffix(2);
  } else if (suffix.size() > 1 && suffix.ends_with("B")) {
    suffix.remove_suffix(1);
  } else if (suffix == "B") {
    suffix = {};
  }
  std::uint64_t factor = 0;
  if (suffix.empty()) {
    factor = 1;
  } else if (suffix.size() == 1) {
    switch (suffix[0]) {
    case 'K': case 'k': factor = 1ULL << 10; break;
    case 'M': case 'm': factor = 1ULL << 20; break;
    case 'G': case 'g': factor = 1ULL << 30; break;
    case 'T': case 't': factor = 1ULL << 40; break;
    default: break;
    }
  }
  if (factor == 0) {
    return Error::refused("bad size \"" + std::string(text) +
                          "\" (expected a number with an optional K, M, G or T suffix)");
  }
  return scale(parts->number, factor, text, "size");
}

Result<std::chrono::seconds> parse_duration(std::string_view text)
{
  auto parts = split_number(text, "duration");
  if (!parts) {
    return parts.error();
  }
  std::uint64_t factor = 0;
  if (parts->suffix.empty() || parts->suffix == "s") {
    factor = 1;
  } else if (parts->suffix == "m") {
    factor = 60;
  } else if (parts->suffix == "h") {
    factor = 3600;
  } else if (parts->suffix == "d") {
    factor = 86400;
  }
  if (factor == 0) {
    return Error::refused("bad duration \"" + std::string(text) +
                          "\" (expected a number with an optional s, m, h or d suffix)");
  }
  auto secs = scale(parts->number, factor, text, "duration");
  if (!secs) {
    return secs.error();
  }
  if (*secs > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max() / 1000)) {
    return Error::refused("duration \"" + std::string(text) + "\" is too large");
  }
  // Longer counts as the longest (a config written for "forever" loads as it did).
  return std::min(std::chrono::seconds(static_cast<std::int64_t>(*secs)), k_max_duration);
}

std::optional<std::uint32_t> parse_u32(std::string_view text)
{
  std::uint32_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size()) {
    return std::nullopt;
  }
  return v;
}

std::string human_bytes(std::uint64_t b)
{
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

} // namespace stagehand
