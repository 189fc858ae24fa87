// The daemon's side of --stage-out: the epilog renames a job's directory aside and hands the copy
// over; a worker thread per job copies it as the job user (job::stage_out), retries a failed copy
// a few times, then moves the directory to the trash and removes it, or, when the copy could not
// complete, keeps it for keep_for (job::keep_results) for `stagehand stage-out retry`. The list is persisted before
// the epilog is answered, so a copy cut short by kill -9 or a restart resumes at the next start.
// The list is the queue's own, under its own lock; nothing else of the daemon's is taken with it.
#pragma once

#include "stagehand/config/config.hpp"
#include "stagehand/proto/messages.hpp"
#include "stagehand/service/peer.hpp"
#include "stagehand/stageout/pending.hpp"
#include "stagehand/tmpdir/job_dir.hpp"
#include "stagehand/util/fd.hpp"

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace stagehand::service {

class StageOutQueue : public std::enable_shared_from_this<StageOutQueue>
{
public:
  // `retry_pause`: the pause between attempts of a failed copy (k_retry_pause; shorter in tests).
  StageOutQueue(Config config, std::string node, int state_dir_fd,
                std::chrono::milliseconds retry_pause = k_retry_pause);

  // Loads the persisted list and starts a worker for every entry (at daemon start).
  void resume();
  // Records the epilog's hand-over (persisted before it returns) and starts its worker.
  // `registered`: the job's user from the registry (the directory is root's by then: taken from
  // its user at job end); without it, an older epilog's directory still owned by the user.
  // The directory is claimed (renamed to a name only the daemon knows, saved before; the epilog's
  // fallback claims it the same way before it copies): exactly one of the two copies. With
  // `epilog` (its connection), an epilog that gave up before the claim is left to copy (an error,
  // which nobody reads); after it, the hand-over is answered "done" here. Without, the caller
  // answers. The directory's name from now on.
  Result<std::string> take(const proto::EndJob& end, std::optional<tmpdir::JobOwner> registered,
                           Responder* epilog = nullptr);
  // The pending copies, for `stagehand status`.
  std::vector<stageout::PendingCopy> pending() const;
  // A reload's configuration, for what the copies do from now on (an attempt under way keeps its own),
  // except [tmpdir] base: the directories to copy stay where they are until the daemon's restart.
  void set_config(const Config& config);
  // The configuration its copies use now: a copy, taken under its own lock (never the node's).
  Config config() const;

  // Pause between attempts of a failed copy.
  static constexpr std::chrono::seconds k_retry_pause{5};
  // A copy the daemon makes may take this long.
  static constexpr std::chrono::hours k_copy_budget{6};

  // Test seam, reset with hooks() = {}: `before_claim` runs in take() between the save and the
  // claim (a test's epilog claims the directory there).
  struct Hooks
  {
    std::function<void()> before_claim;
    std::function<void(const stageout::PendingCopy&, bool complete)> after_attempt;
  };
  static Hooks& hooks();

private:
  bool still_there(const stageout::PendingCopy& p) const; // its directory, unless it is gone (ENOENT)
  // The configuration `p`'s copy uses: its own base (a daemon restarted with another base copies
  // what was pending under the old one), the rest as now.
  Config config_for(const stageout::PendingCopy& p) const;
  void start_worker(const stageout::PendingCopy& p);
  void work(stageout::PendingCopy p);
  // Returns once no earlier copy of the same job (an earlier run, before a requeue) is pending: a
  // later run's files replace the earlier's, and no two copies write one DEST at once.
  void wait_for_earlier_runs(const stageout::PendingCopy& p);
  void save_locked();
  void forget(const std::string& dir); // off the persisted list

  Config m_config; // guarded by m_mutex
  std::string m_node;
  std::chrono::milliseconds m_retry_pause;
  UniqueFd m_state_dir;
  mutable std::mutex m_mutex;
  std::vector<stageout::PendingCopy> m_pending; // in the order taken
  std::condition_variable m_forgotten;           // a copy left m_pending
};

} // namespace stagehand::service
