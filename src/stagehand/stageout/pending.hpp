// The daemon's list of stage-outs still to finish, persisted in its state directory so that a
// copy interrupted by a crash, kill -9 or restart resumes: pure data with a JSON form.
#pragma once

#include "stagehand/util/result.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace stagehand::stageout {

struct PendingCopy
{
  std::uint32_t job_id = 0;
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  std::string dir;          // ".stageout.job_<id>.<unique>" under the node's base
  std::string specs;        // canonical entries
  std::string fallback_dir; // the submit directory
  std::uint32_t attempts = 0;
  std::string base{};       // [tmpdir] base (as configured) `dir` is under; "" (a list from before): the daemon's
  bool operator==(const PendingCopy&) const = default;
};

inline constexpr const char* k_pending_file = "stage-out.json";
inline constexpr std::uint32_t k_max_attempts = 3;

// What the daemon does after an attempt at a copy: done (the results delivered, the directory
// removed), keep the results on the node for `stagehand stage-out retry` (3 attempts failed; never
// deleted because a copy failed), or try again after a pause.
enum class AfterAttempt { done, keep_results, retry };
AfterAttempt after_attempt(bool complete, std::uint32_t attempts);

std::string to_json(const std::vector<PendingCopy>& pending);
Result<std::vector<PendingCopy>> from_json(std::string_view text);

// Loads the list from `state_dir_fd` (empty when there is none yet); saves it atomically.
Result<std::vector<PendingCopy>> load_pending(int state_dir_fd);
Status save_pending(int state_dir_fd, const std::vector<PendingCopy>& pending);

} // namespace stagehand::stageout
