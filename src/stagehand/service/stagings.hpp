// The stagings running through the daemon on a node, as `stagehand status` shows them: each
// request's latest progress, seen by its user and by root. Its own lock, taken last.
#pragma once

#include "stagehand/proto/messages.hpp"

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace stagehand::service {

class Stagings
{
public:
  using Id = std::uint64_t;

  // A staging starts for `uid`: its id (never 0, never given twice), listed once it reports progress.
  Id open(uid_t uid);
  void report(Id id, const proto::Progress& progress);
  void close(Id id);
  // What a caller may see: root every staging, a user only their own.
  enum class Viewer { root, user };
  std::vector<proto::Progress> seen_by(Viewer viewer, uid_t uid) const;

private:
  struct Running
  {
    uid_t uid = 0;
    bool reported = false;
    proto::Progress progress;
  };
  mutable std::mutex m_mutex;
  std::map<Id, Running> m_running;
  Id m_last = 0;
};

} // namespace stagehand::service
