// $SLURM_TMPDIR/.stagehand on one node, as the job user: the lock the job's tasks there take
// before staging (one stages, the others find its outcome) and the markers that record it. The
// staging helper and the plugin (a staging whose every source is a cache view) share it.
#pragma once

#include "stagehand/stage/request.hpp"
#include "stagehand/util/fd.hpp"
#include "stagehand/util/result.hpp"

#include <string>

namespace stagehand::stage {

struct LockedStateDir
{
  UniqueFd root;  // the job's directory
  UniqueFd state; // its .stagehand (made 0700 if missing)
  UniqueFd lock;  // held (flock) while this lives
};

// Opens `tmpdir_path` (never through a symlink) and its .stagehand, and waits for the lock (the
// job's, k_lock_name, or another lock file there). The error names what could not be opened or
// locked.
Result<LockedStateDir> lock_state_dir(const std::string& tmpdir_path, const std::string& lock_name = k_lock_name);

// Waits for the lock file `name` in the state directory (made if missing); the descriptor holds it.
Result<UniqueFd> lock_in(int state_fd, const std::string& name);

// Whether marker `name` is in the state directory.
bool has_marker(int state_fd, const std::string& name);

// Writes marker `name` with `text` (best effort: the job's output has said it already).
void write_marker(int state_fd, const std::string& name, const std::string& text);

} // namespace stagehand::stage
