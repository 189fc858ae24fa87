// The persisted list of pending stage-outs.
#include "stagehand/stageout/pending.hpp"

#include "stagehand/fs/atomic_file.hpp"

#include <nlohmann/json.hpp>

namespace stagehand::stageout {

using json = nlohmann::json;

AfterAttempt after_attempt(bool complete, std::uint32_t attempts)
{
  if (complete) {
    return AfterAttempt::done;
  }
  return attempts >= k_max_attempts ? AfterAttempt::keep_results : AfterAttempt::retry;
}

std::string to_json(const std::vector<PendingCopy>& pending)
{
  json list = json::array();
  for (const auto& p : pending) {
    list.push_back(json{{"job_id", p.job_id},
                        {"uid", p.uid},
                        {"gid", p.gid},
                        {"dir", p.dir},
                        {"specs", p.specs},
                        {"fallback_dir", p.fallback_dir},
                        {"attempts", p.attempts},
                        {"base", p.base}});
  }
  return json{{"version", 1}, {"pending", list}}.dump(1) + "\n";
}

Result<std::vector<PendingCopy>> from_json(std::string_view text)
{
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("pending") || !j["pending"].is_array()) {
    return Error::io("stage-out list: not a stage-out list file", EINVAL);
  }
  std::vector<PendingCopy> out;
  try {
    for (const auto& item : j["pending"]) {
      PendingCopy p;
      p.job_id = item.at("job_id").get<std::uint32_t>();
      p.uid = item.at("uid").get<std::uint32_t>();
      p.gid = item.at("gid").get<std::uint32_t>();
      p.dir = item.at("dir").get<std::string>();
      p.specs = item.at("specs").get<std::string>();
      p.fallback_dir = item.value("fallback_dir", std::string());
      p.attempts = item.value("attempts", std::uint32_t{0});
      p.base = item.value("base", std::string());
      out.push_back(std::move(p));
    }
  } catch (const json::exception& e) {
    return Error::io(std::string("stage-out list: ") + e.what(), EINVAL);
  }
  return out;
}

Result<std::vector<PendingCopy>> load_pending(int state_dir_fd)
{
  auto text = fs::read_small_file(state_dir_fd, k_pending_file);
  if (!text) {
    if (text.error().code == ENOENT) {
      return std::vector<PendingCopy>{};
    }
    return text.error();
  }
  return from_json(*text);
}

Status save_pending(int state_dir_fd, const std::vector<PendingCopy>& pending)
{
  return fs::write_file_atomic(state_dir_fd, k_pending_file, to_json(pending), 0600);
}

} // namespace stagehand::stageout
