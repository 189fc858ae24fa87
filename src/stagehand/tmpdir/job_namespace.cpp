#include "stagehand/tmpdir/job_namespace.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>

namespace stagehand::tmpdir {

namespace {

bool same_key(std::string_view a, std::string_view b)
{
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim_slashes(std::string_view p)
{
  while (p.size() > 1 && p.back() == '/') {
    p.remove_suffix(1);
  }
  return p;
}

} // namespace

std::optional<std::string> slurm_conf_value(std::string_view text, std::string_view key)
{
  std::optional<std::string> found;
  std::istringstream lines{std::string(text)};
  std::string line;
  while (std::getline(lines, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string word;
    while (words >> word) {
      const auto eq = word.find('=');
      if (eq == std::string::npos || !same_key(std::string_view(word).substr(0, eq), key)) {
        continue;
      }
      std::string value = word.substr(eq + 1);
      if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
        value = value.substr(1, value.size() - 2);
      }
      found = value;
    }
  }
  return found;
}

std::vector<std::string> private_job_dirs(std::string_view slurm_conf, std::string_view job_container_conf)
{
  auto plugin = slurm_conf_value(slurm_conf, "NamespaceType");
  if (!plugin) {
    plugin = slurm_conf_value(slurm_conf, "JobContainerType");
  }
  if (!plugin || !(plugin->ends_with("/tmpfs"))) {
    return {};
  }
  const std::string dirs = slurm_conf_value(job_container_conf, "Dirs").value_or("/tmp,/dev/shm");
  std::vector<std::string> out;
  std::istringstream list(dirs);
  std::string dir;
  while (std::getline(list, dir, ',')) {
    if (!dir.empty()) {
      out.push_back(dir);
    }
  }
  return out;
}

std::optional<std::string> dir_hiding_base(std::string_view base, const std::vector<std::string>& dirs)
{
  std::string_view fixed = base.substr(0, base.find('%'));
  if (base.find('%') != std::string_view::npos) {
    fixed = fixed.substr(0, fixed.rfind('/') + 1); // the directories above the %n component
  }
  fixed = trim_slashes(fixed);
  for (const auto& d : dirs) {
    const std::string_view dir = trim_slashes(d);
    if (dir.empty() || dir.front() != '/') {
      continue;
    }
    if (fixed == dir || dir == "/" || (fixed.starts_with(dir) && fixed.size() > dir.size() && fixed[dir.size()] == '/')) {
      return d;
    }
  }
  return std::nullopt;
}

std::string hidden_base_message(std::string_view base, std::string_view dir)
{
  return "[tmpdir] base \"" + std::string(base) + "\" lies in " + std::string(dir) +
         ", which Slurm's namespace/tmpfs makes private to each job (job_container.conf Dirs): jobs cannot see "
         "their directories there; set base outside Dirs (beside them, e.g. /local/stagehand)";
}

} // namespace stagehand::tmpdir
