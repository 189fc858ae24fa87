// The reads of sources under way on a node, and the claims of jobs starting together.
#include "stagehand/service/reads.hpp"

namespace stagehand::service {

std::shared_ptr<FillWait> ReadsUnderWay::find(const std::string& key) const
{
  auto it = m_reads.find(key);
  return it == m_reads.end() ? nullptr : it->second;
}

std::shared_ptr<FillWait> ReadsUnderWay::find_any(const std::vector<std::string>& keys) const
{
  for (const auto& key : keys) {
    if (auto wait = find(key)) {
      return wait;
    }
  }
  return nullptr;
}

std::shared_ptr<FillWait> ReadsUnderWay::begin(const std::string& key, const std::string& claimed_as,
                                               Clock::time_point now)
{
  auto wait = std::make_shared<FillWait>();
  wait->progressed = now;
  m_reads[key] = wait;
  m_claims.erase(claimed_as);
  m_began.notify_all();
  return wait;
}

void ReadsUnderWay::end(const std::string& key, const std::shared_ptr<FillWait>& wait)
{
  if (auto it = m_reads.find(key); it != m_reads.end() && it->second == wait) {
    m_reads.erase(it);
  }
}

bool ReadsUnderWay::claim(const std::string& key, Clock::time_point now, Clock::duration claims_last)
{
  std::erase_if(m_claims, [&](const auto& c) { return now - c.second > claims_last; });
  return m_claims.emplace(key, now).second;
}

std::shared_ptr<FillWait> ReadsUnderWay::await_begin(std::unique_lock<std::mutex>& lock,
                                                     const std::vector<std::string>& keys, Clock::time_point until)
{
  auto wait = find_any(keys);
  while (!wait && Clock::now() < until) {
    m_began.wait_until(lock, until);
    wait = find_any(keys);
  }
  return wait;
}

} // namespace stagehand::service
