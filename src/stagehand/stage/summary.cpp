#include "stagehand/stage/summary.hpp"

#include "stagehand/util/units.hpp"

#include <cstdio>

namespace stagehand::stage {

std::string summary_line(Placement how, const std::string& shown, const std::string& tmpdir_path,
                         const std::string& dest, std::uint64_t files, std::uint64_t bytes, double seconds,
                         const std::string& cache, const std::string& note)
{
  char line[256];
  std::snprintf(line, sizeof line, ": %llu files, %s in %.2f s", static_cast<unsigned long long>(files),
                human_bytes(bytes).c_str(), seconds);
  return std::string(name_of(how)) + " " + shown + " -> " + tmpdir_path + "/" + dest + line +
         (note.empty() ? "" : ", " + note) + " (" + cache + ")";
}

} // namespace stagehand::stage
