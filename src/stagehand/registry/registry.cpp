// Registry operations and its JSON form.
#include "stagehand/registry/registry.hpp"

#include "stagehand/fs/atomic_file.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <functional>

namespace stagehand::registry {

using nlohmann::json;

namespace {

void count_down(std::map<std::string, std::uint32_t>& counts, const std::string& key)
{
  if (auto it = counts.find(key); it != counts.end() && --it->second == 0) {
    counts.erase(it);
  }
}

} // namespace

void Registry::pin(const JobRecord& job)
{
  if (job.state == JobState::running) {
    for (const auto& key : job.cache_keys) {
      ++m_pinned[key];
    }
    for (const auto& key : job.view_keys) {
      ++m_viewed[key];
    }
  }
}

void Registry::unpin(const JobRecord& job)
{
  if (job.state != JobState::running) {
    return;
  }
  for (const auto& key : job.cache_keys) {
    count_down(m_pinned, key);
  }
  for (const auto& key : job.view_keys) {
    count_down(m_viewed, key);
  }
}

void Registry::register_job(const JobRecord& record)
{
  if (auto it = m_jobs.find(record.job_id); it != m_jobs.end()) {
    unpin(it->second);
  }
  m_jobs[record.job_id] = record;
  pin(record);
}

void Registry::end_job(std::uint32_t job_id, std::int64_t now, std::int64_t keep_until)
{
  auto it = m_jobs.find(job_id);
  if (it == m_jobs.end()) {
    return;
  }
  unpin(it->second);
  it->second.state = JobState::ended;
  it->second.ended_at = now;
  it->second.keep_until = keep_until;
  it->second.cache_keys.clear();
  it->second.view_keys.clear();
}

void Registry::forget(std::uint32_t job_id)
{
  if (auto it = m_jobs.find(job_id); it != m_jobs.end()) {
    unpin(it->second);
    m_jobs.erase(it);
  }
}

void Registry::add_cache_key(std::uint32_t job_id, const std::string& key, KeyUse use)
{
  auto it = m_jobs.find(job_id);
  if (it == m_jobs.end()) {
    return;
  }
  const bool running = it->second.state == JobState::running;
  if (it->second.cache_keys.insert(key).second && running) {
    ++m_pinned[key];
  }
  if (use == KeyUse::viewed && it->second.view_keys.insert(key).second && running) {
    ++m_viewed[key];
  }
}

bool Registry::charge(std::uint32_t job_id, std::uint64_t bytes, std::uint64_t limit)
{
  auto it = m_jobs.find(job_id);
  if (it == m_jobs.end()) {
    return bytes <= limit;
  }
  if (it->second.staged_bytes > limit || bytes > limit - it->second.staged_bytes) {
    return false;
  }
  it->second.staged_bytes += bytes;
  return true;
}

std::vector<std::uint32_t> Registry::ended_by_slurmctld(const std::set<std::uint32_t>& running_here,
                                                        const std::set<std::uint32_t>& live_steps,
                                                        std::int64_t asked_at) const
{
  std::vector<std::uint32_t> out;
  for (const auto& [id, job] : m_jobs) {
    // Registered at or after the question: slurmctld's answer may predate the job here.
    if (job.state == JobState::running && job.registered_at < asked_at && !running_here.count(id) &&
        !live_steps.count(id)) {
      out.push_back(id);
    }
  }
  return out;
}

std::vector<std::uint32_t> Registry::forgettable(std::int64_t now, std::int64_t max_age, std::size_t max_ended) const
{
  std::vector<std::pair<std::int64_t, std::uint32_t>> ended; // (ended_at, job), newest first below
  for (const auto& [id, job] : m_jobs) {
    if (job.state == JobState::ended && job.keep_until < now) {
      ended.emplace_back(job.ended_at, id);
    }
  }
  std::sort(ended.begin(), ended.end(), std::greater<>());
  std::vector<std::uint32_t> out;
  for (std::size_t i = 0; i < ended.size(); ++i) {
    if (i >= max_ended || now - ended[i].first > max_age) {
      out.push_back(ended[i].second);
    }
  }
  return out;
}

const JobRecord* Registry::find(std::uint32_t job_id) const
{
  auto it = m_jobs.find(job_id);
  return it == m_jobs.end() ? nullptr : &it->second;
}

bool Registry::key_in_use(const std::string& key) const { return m_pinned.count(key) > 0; }

bool Registry::key_viewed(const std::string& key) const { return m_viewed.count(key) > 0; }

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
                        {"cache_keys", job.cache_keys},
                        {"view_keys", job.view_keys},
                        {"staged_bytes", job.staged_bytes},
                        {"stage_data", job.staging == stage::StagingAsked::yes}});
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
      rec.cache_keys = item.value("cache_keys", std::set<std::string>{});
      rec.view_keys = item.value("view_keys", std::set<std::string>{}); // (absent before: none known)
      rec.staged_bytes = item.value("staged_bytes", std::uint64_t{0});
      rec.staging = item.value("stage_data", true) ? stage::StagingAsked::yes : stage::StagingAsked::no;
      r.register_job(rec);
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
