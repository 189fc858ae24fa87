// Entry name checks (the first line of defence; the writer's O_NOFOLLOW walk is the second).
#include "stagehand/archive/entry_path.hpp"
#include "stagehand/util/strings.hpp"

namespace stagehand::archive {

Result<std::vector<std::string>> split_entry_path(std::string_view name)
{
  auto refuse = [&](const char* why) {
    return Error::refused("archive entry \"" + std::string(name.substr(0, 200)) + (name.size() > 200 ? "..." : "") +
                          "\": " + why);
  };
  if (name.empty()) {
    return refuse("empty name");
  }
  if (name.size() > k_max_entry_path) {
    return refuse("name longer than 4096 bytes");
  }
  if (name.find('\0') != std::string_view::npos) {
    return refuse("name contains a NUL byte");
  }
  if (name.front() == '/') {
    return refuse("absolute name");
  }
  std::vector<std::string> parts;
  for (std::string_view part : split(name, '/')) {
    if (part == "..") {
      return refuse("\"..\" in name");
    }
    if (!part.empty() && part != ".") {
      parts.emplace_back(part);
    }
  }
  if (parts.size() > k_max_entry_depth) {
    return refuse(("nested deeper than " + std::to_string(k_max_entry_depth) + " levels").c_str());
  }
  return parts;
}

} // namespace stagehand::archive
