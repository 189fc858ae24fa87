#include "stagehand/util/cpu_list.hpp"

#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <memory>

namespace stagehand {

namespace {

struct CpuSetFree
{
  void operator()(cpu_set_t* s) const { CPU_FREE(s); }
};
using CpuSet = std::unique_ptr<cpu_set_t, CpuSetFree>;

constexpr int k_most_cpus = 1 << 16;

} // namespace

std::vector<int> affinity_of(pid_t pid)
{
  // As large a set as the kernel's CPU count needs: EINVAL says the set is too small.
  for (int n = 1024; n <= k_most_cpus; n *= 2) {
    CpuSet set(CPU_ALLOC(n));
    if (!set) {
      return {};
    }
    const std::size_t size = CPU_ALLOC_SIZE(n);
    CPU_ZERO_S(size, set.get());
    if (::sched_getaffinity(pid, size, set.get()) == 0) {
      std::vector<int> cpus;
      for (int cpu = 0; cpu < n; ++cpu) {
        if (CPU_ISSET_S(cpu, size, set.get())) {
          cpus.push_back(cpu);
        }
      }
      return cpus;
    }
    if (errno != EINVAL) {
      return {};
    }
  }
  return {};
}

bool run_on(const std::vector<int>& cpus)
{
  if (cpus.empty()) {
    return true;
  }
  int n = 1;
  for (int cpu : cpus) {
    if (cpu < 0 || cpu >= k_most_cpus) {
      return false;
    }
    n = std::max(n, cpu + 1);
  }
  CpuSet set(CPU_ALLOC(n));
  if (!set) {
    return false;
  }
  const std::size_t size = CPU_ALLOC_SIZE(n);
  CPU_ZERO_S(size, set.get());
  for (int cpu : cpus) {
    CPU_SET_S(cpu, size, set.get());
  }
  return ::sched_setaffinity(0, size, set.get()) == 0;
}

std::string cpu_ranges(const std::vector<int>& cpus)
{
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) {
      ++j;
    }
    if (!out.empty()) {
      out += ',';
    }
    out += std::to_string(cpus[i]);
    if (j > i) {
      out += '-' + std::to_string(cpus[j]);
    }
    i = j + 1;
  }
  return out;
}

} // namespace stagehand
