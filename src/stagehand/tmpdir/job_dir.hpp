// The per-job scratch directory: created, found, kept and removed under a root-owned base.
#pragma once

#include "stagehand/util/result.hpp"

#include <sys/types.h>

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

namespace stagehand::tmpdir {

struct JobOwner
{
  std::uint32_t job_id = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// "job_<id>": the directory's name under the base.
std::string job_dir_name(std::uint32_t job_id);

enum class CreateOutcome { created, replaced_stale };

// Creates base/job_<id>, 0700, owned by the job user, atomically: it is made under a temporary
// name, fchown'ed and fchmod'ed through its fd, then renamed into place with RENAME_NOREPLACE, so
// the name never refers to a half-made directory. Whatever was at the name before is stale or
// planted: it is moved into the trash
// (removed later by GC, off the critical path), never adopted. `base_fd` must come from open_trusted_dir.
Result<CreateOutcome> create_job_dir(int base_fd, const JobOwner& owner);

// Job start: the cache views an earlier run of this job left on this node (its epilog never ran,
// or could not remove them; then a requeue onto the same node) go to the trash, in O(1) and with
// whatever is mounted below them detached by its removal, so that no task of this run takes their
// record for views of its own. None: ok.
Status discard_earlier_views(int base_fd, std::uint32_t job_id);

// Removes base/job_<id> and its keep marker, if present (fd-based, no symlinks, no mounts).
Status remove_job_dir(int base_fd, std::uint32_t job_id);

// Records that base/job_<id> is kept until `until`: a root-owned marker file in the base that names
// the directory's inode, so it belongs to this instance of the directory and to no later one.
Status mark_kept(int base_fd, std::uint32_t job_id, std::time_t until);

// The name of the keep marker of a job.
std::string keep_marker_name(std::uint32_t job_id);

struct KeepMarker
{
  std::int64_t until = 0;
  std::uint64_t ino = 0; // the directory instance it belongs to; 0: an old marker without one
};
// Reads the keep marker `name` in the base ("UNTIL [INODE]"); nullopt when absent or unreadable.
std::optional<KeepMarker> read_keep_marker(int base_fd, const std::string& name);

// After the job, root takes a directory away from its user before anything else: owner root:root,
// mode 0700, through an fd opened beneath the base without crossing a mount, so the user can no
// longer enter it (nor mount anything on it or below it to pin node-local data). A mount point
// (the user mounted on the directory itself) cannot be opened without crossing: EXDEV, and GC
// detaches it. A missing directory: ENOENT.
Status take_from_user(int base_fd, const std::string& name);
// The same through an fd of the directory.
Status take_from_user(int dir_fd);
// Gives the directory (an fd of it) back to its user, owner and 0700 as the prolog made it: for
// a stage-out copy that runs as the user (then taken away again), and for results kept for the
// user after a copy that could not complete.
Status hand_back(int dir_fd, const JobOwner& owner);

// Job end: takes base/job_<id> from its user, then renames it to a fresh ".trash.job_<id>.<unique>"
// name in one O(1) rename and returns that name (nullopt when there is no directory). Whatever the job left, the epilog is done
// with it at once; the trash is removed in the background (the daemon) or within a budget.
Result<std::optional<std::string>> move_to_trash(int base_fd, std::uint32_t job_id);

// Job end with --stage-out: takes base/job_<id> from its user (the copy hands it back for its own
// time, stageout's hook), then renames it to a fresh
// ".stageout.job_<id>.<unique>" name (nullopt when there is no directory), a name garbage
// collection never touches: the daemon copies from it, then moves it to the trash.
inline constexpr const char* k_stage_out_prefix = ".stageout.";
Result<std::optional<std::string>> move_to_stage_out(int base_fd, std::uint32_t job_id);
// The job id of a ".stageout.job_<id>.<unique>" name (none for anything with a '/': a path).
std::optional<std::uint32_t> job_of_stage_out(const std::string& name);
// Renames job `job_id`'s ".stageout." entry (or its job_<id> directory) `from` to a fresh
// ".stageout.job_<id>.<unique>" name, one no other process knows (a retry works on that name, so a
// second retry or GC that decided on the old one finds nothing); the new name.
Result<std::string> renew_stage_out(int base_fd, std::uint32_t job_id, const std::string& from);
// The same in two steps, for a caller that records the new name before it takes it: a fresh
// ".stageout.job_<id>.<unique>" name, then the rename of `from` (job `job_id`'s) to it (ENOENT:
// someone else renamed `from` first).
std::string fresh_stage_out_name(std::uint32_t job_id);
Status claim_stage_out(int base_fd, std::uint32_t job_id, const std::string& from, const std::string& to);
// Takes a ".stageout." entry from its user and renames it into the trash; the trash name.
Result<std::string> stage_out_to_trash(int base_fd, const std::string& pending);

// A stage-out that could not complete keeps its directory (".stageout.job_<id>.<unique>", or
// job_<id> under --tmpdir=keep) and a root-owned record beside it that names it:
// ".failed-stage-out.<name without its leading dot>" (stageout/kept.hpp holds what is in it).
inline constexpr const char* k_kept_record_prefix = ".failed-stage-out.";
std::string kept_record_name(const std::string& dir);
// The directory a record name belongs to (nullopt for other names).
std::optional<std::string> dir_of_kept_record(const std::string& name);

// As the job user in a task: the job's directory path if it exists, is a real directory (not a
// symlink) and is owned by `uid`.
Result<std::string> find_job_dir(const std::string& base_path, std::uint32_t job_id, uid_t uid);

// Rejects node names that would make "%n" escape the base ("", ".", "..", or containing '/').
Status check_node_name(const std::string& node);

} // namespace stagehand::tmpdir
