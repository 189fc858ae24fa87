// The stagings running through the daemon, for status.
#include "stagehand/service/stagings.hpp"

namespace stagehand::service {

Stagings::Id Stagings::open(uid_t uid)
{
  std::lock_guard lock(m_mutex);
  const Id id = ++m_last;
  m_running[id] = Running{uid, false, {}};
  return id;
}

void Stagings::report(Id id, const proto::Progress& progress)
{
  std::lock_guard lock(m_mutex);
  if (auto it = m_running.find(id); it != m_running.end()) {
    it->second.reported = true;
    it->second.progress = progress;
  }
}

void Stagings::close(Id id)
{
  std::lock_guard lock(m_mutex);
  m_running.erase(id);
}

std::vector<proto::Progress> Stagings::seen_by(Viewer viewer, uid_t uid) const
{
  std::lock_guard lock(m_mutex);
  std::vector<proto::Progress> seen;
  for (const auto& [id, running] : m_running) {
    if (running.reported && (viewer == Viewer::root || running.uid == uid)) {
      seen.push_back(running.progress);
    }
  }
  return seen;
}

} // namespace stagehand::service
