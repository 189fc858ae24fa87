// How many of the node's CPUs sat idle: /proc/stat's counters, sampled twice.
#include "stagehand/util/cpu_idle.hpp"

#include <array>
#include <charconv>

namespace stagehand {

namespace {

// The first eight fields of a "cpu" line: user nice system idle iowait irq softirq steal (guest
// time is counted in user already).
constexpr std::size_t k_fields = 8;

std::string_view next_word(std::string_view& line)
{
  const auto start = line.find_first_not_of(' ');
  if (start == std::string_view::npos) {
    line = {};
    return {};
  }
  line.remove_prefix(start);
  const auto end = line.find(' ');
  const std::string_view word = line.substr(0, end);
  line.remove_prefix(end == std::string_view::npos ? line.size() : end);
  return word;
}

} // namespace

Result<CpuTimes> parse_proc_stat(std::string_view text)
{
  CpuTimes t;
  bool summed = false;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    const std::string_view name = next_word(line);
    if (name.size() > 3 && name.starts_with("cpu")) {
      ++t.cpus;
      continue;
    }
    if (name != "cpu") {
      continue;
    }
    std::array<std::uint64_t, k_fields> v{};
    for (std::size_t i = 0; i < k_fields; ++i) {
      const std::string_view w = next_word(line);
      if (w.empty() && i >= 4) {
        break; // an old kernel's shorter line
      }
      if (std::from_chars(w.data(), w.data() + w.size(), v[i]).ec != std::errc{}) {
        return Error::corrupt("/proc/stat: the cpu line does not hold counters");
      }
    }
    t.idle = v[3] + v[4];
    for (const auto x : v) {
      t.total += x;
    }
    summed = true;
  }
  if (!summed || t.cpus == 0) {
    return Error::corrupt("/proc/stat: no cpu lines");
  }
  return t;
}

double idle_cpus(const CpuTimes& before, const CpuTimes& after)
{
  if (after.total <= before.total || after.idle < before.idle) {
    return 0.0;
  }
  const double share = static_cast<double>(after.idle - before.idle) / static_cast<double>(after.total - before.total);
  return share * after.cpus;
}

} // namespace stagehand
