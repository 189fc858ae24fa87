// Registry operations and its JSON form.
#include "stagehand/registry/registry.hpp"

#include "stagehand/fs/atomic_file.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace stagehand::registry {

using nlohmann::json;

void Registry::register_job(const JobRecord& record)
{
  m_jobs[record.job_id] = record;
}

void Registry::end_job(std::uint32_t job_id, std::int64_t now, std::int64_t keep_until)
{
  auto it = m_jobs.find(job_id);
  if (it == m_jobs.end()) {
    return;
  }
  it->second.state = JobState::ended;
  it->second.ended_at = now;
  it->second.keep_until = keep_until;
  it->second.cache_keys.clear();
}

void Registry::forget(std::uint32_t job_id) { m_jobs.erase(job_id); }

void Registry::add_cache_key(std::uint32_t job_id, const std::string& key)
{
  auto it = m_jobs.find(job_id);
  if (it != m_jobs.end() && std::find(it->second.cache_keys.begin(), it->second.cache_keys.end(), key) ==
                              it->second.cache_keys.end()) {
    it->second.cache_keys.push_back(key);
  }
}

const JobRecord* Registry::find(std::uint32_t job_id) const
{
  auto it = m_jobs.find(job_id);
  return it == m_jobs.end() ? nullptr : &it->second;
}

bool Registry::key_in_use(const std::string& key) const
{
  for (const auto& [id, job] : m_jobs) {
    if (job.state == JobState::running &&
        std::find(job.cache_keys.begin(), job.cache_keys.end(), key) != job.cache_keys.end()) {
      return true;
    }
  }
  return false;
}

std::string Registry::to_json() const
{
  json jobs = json::array();
  for (const auto& [id, job] : m_jobs) {
    jobs.push_back(json{{"job_id", job.job_id},
                        {"uid", job.uid},
                        {"gid", job.gid},
                        {"state", job.state == JobState::running ? "running" : "ended"},
                        {"registered_at", job.registered_at},
                        {"ended_at", job.ended_at},
                        {"keep_until", job.keep_until},
                        {"cache_keys", job.cache_keys}});
  }
  return json{{"version", 1}, {"jobs", jobs}}.dump(1) + "\n";
}

Result<Registry> Registry::from_json(std::string_view text)
{
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("jobs") || !j["jobs"].is_array()) {
    return Error::io("registry: not a registry file", EINVAL);
  }
  Registry r;
  try {
    for (const auto& item : j["jobs"]) {
      JobRecord rec;
      rec.job_id = item.at("job_id").get<std::uint32_t>();
      rec.uid = item.at("uid").get<std::uint32_t>();
      rec.gid = item.at("gid").get<std::uint32_t>();
      rec.state = item.at("state").get<std::string>() == "running" ? JobState::running : JobState::ended;
      rec.registered_at = item.value("registered_at", std::int64_t{0});
      rec.ended_at = item.value("ended_at", std::int64_t{0});
      rec.keep_until = item.value("keep_until", std::int64_t{0});
      rec.cache_keys = item.value("cache_keys", std::vector<std::string>{});
      r.m_jobs[rec.job_id] = std::move(rec);
    }
  } catch (const json::exception& e) {
    return Error::io(std::string("registry: ") + e.what(), EINVAL);
  }
  return r;
}

Result<Registry> load(int state_dir_fd)
{
  auto text = fs::read_small_file(state_dir_fd, k_registry_file);
  if (!text) {
    if (text.error().code == ENOENT) {
      return Registry{};
    }
    return text.error();
  }
  return Registry::from_json(*text);
}

Status save(int state_dir_fd, const Registry& registry)
{
  return fs::write_file_atomic(state_dir_fd, k_registry_file, registry.to_json(), 0600);
}

} // namespace stagehand::registry
