// Job directory lifecycle as root, fd-relative throughout.
#include "stagehand/tmpdir/job_dir.hpp"

#include "stagehand/fs/atomic_file.hpp"
#include "stagehand/fs/dir_stream.hpp"
#include "stagehand/fs/remove_tree.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/tmpdir/views.hpp"
#include "stagehand/util/fd.hpp"
#include "stagehand/util/units.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <memory>
#include <optional>

namespace stagehand::tmpdir {

namespace {

constexpr std::string_view k_keep_prefix = ".keep.";
constexpr std::string_view k_new_prefix = ".new.";
constexpr std::string_view k_trash_prefix = ".trash.";

std::string unique_suffix()
{
  static std::atomic<unsigned> counter{0};
  return std::to_string(::getpid()) + "." + std::to_string(counter++);
}

// Moves `name` into the trash under a fresh name, in O(1): whatever a stale directory holds is
// removed off the critical path (the daemon, or `stagehand gc`), never by a prolog.
// `name` in `from_fd` (the base, or a directory in it) becomes ".trash.<stem>.<unique>" in the base.
Status move_aside(int base_fd, const std::string& name, int from_fd = -1, const std::string& stem = "")
{
  from_fd = from_fd < 0 ? base_fd : from_fd;
  std::string trash = std::string(k_trash_prefix) + (stem.empty() ? name : stem) + "." + unique_suffix();
  if (::renameat2(from_fd, name.c_str(), base_fd, trash.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno == ENOENT) {
      return ok_status();
    }
    return Error::from_errno("cannot move stale " + (stem.empty() ? name : stem) + " aside");
  }
  return ok_status();
}

} // namespace

std::string job_dir_name(std::uint32_t job_id) { return "job_" + std::to_string(job_id); }

std::string keep_marker_name(std::uint32_t job_id) { return std::string(k_keep_prefix) + job_dir_name(job_id); }

Result<CreateOutcome> create_job_dir(int base_fd, const JobOwner& owner)
{
  const std::string name = job_dir_name(owner.job_id);
  const std::string staging = std::string(k_new_prefix) + name + "." + unique_suffix();

  if (::mkdirat(base_fd, staging.c_str(), 0700) != 0) {
    return Error::from_errno("cannot create " + staging);
  }
  auto discard = [&] { (void)fs::remove_tree(base_fd, staging); };
  {
    UniqueFd fd(::openat(base_fd, staging.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
      Error e = Error::from_errno("cannot open " + staging);
      discard();
      return e;
    }
    if (st.st_uid != ::geteuid() || !S_ISDIR(st.st_mode)) { // cannot happen under a root-owned base
      discard();
      return Error{ErrorKind::refused, EPERM, staging + " was replaced while being created"};
    }
    if (::fchown(fd.get(), owner.uid, owner.gid) != 0 || ::fchmod(fd.get(), 0700) != 0) {
      Error e = Error::from_errno("cannot set owner/mode of " + name);
      discard();
      return e;
    }
  }

  // A requeued job: the keep marker of its earlier run belongs to a directory that no longer
  // exists once this one replaces it; it must never expire the new one.
  if (::unlinkat(base_fd, keep_marker_name(owner.job_id).c_str(), 0) != 0 && errno != ENOENT) {
    Error e = Error::from_errno("cannot remove the stale " + keep_marker_name(owner.job_id));
    discard();
    return e;
  }
  CreateOutcome outcome = CreateOutcome::created;
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (::renameat2(base_fd, staging.c_str(), base_fd, name.c_str(), RENAME_NOREPLACE) == 0) {
      return outcome;
    }
    if (errno != EEXIST) {
      Error e = Error::from_errno("cannot rename " + staging + " to " + name);
      discard();
      return e;
    }
    if (auto aside = move_aside(base_fd, name); !aside) {
      Error e = aside.error();
      discard();
      return e;
    }
    outcome = CreateOutcome::replaced_stale;
  }
  discard();
  return Error{ErrorKind::io, EEXIST, name + " keeps reappearing"};
}

Status discard_earlier_views(int base_fd, std::uint32_t job_id)
{
  UniqueFd views(::openat(base_fd, k_views_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!views.valid()) {
    return errno == ENOENT ? ok_status() : Error::from_errno(std::string("cannot open ") + k_views_dir);
  }
  auto moved = move_aside(base_fd, job_views_name(job_id), views.get(), "views." + job_views_name(job_id));
  if (moved) {
    return moved;
  }
  // Not moved: at least no record of the earlier run's views is read as this run's (its mounts and
  // upper directories stay for GC, which removes the views of jobs gone).
  UniqueFd mine(::openat(views.get(), job_views_name(job_id).c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  auto names = mine.valid() ? fs::list_names(mine.get(), job_views_name(job_id))
                            : Result<std::vector<std::string>>(Error::from_errno("open"));
  bool all = static_cast<bool>(names);
  for (const auto& n : names ? *names : std::vector<std::string>{}) {
    if (n.starts_with("record") && ::unlinkat(mine.get(), n.c_str(), 0) != 0 && errno != ENOENT) {
      all = false;
    }
  }
  return all ? Error{moved.error().kind, moved.error().code,
                     "an earlier run's cache views could not be moved to the trash (" + moved.error().message +
                       "): their records were removed"}
             : Error{moved.error().kind, moved.error().code,
                     "an earlier run's cache views could not be moved to the trash nor their records removed (" +
                       moved.error().message + "): this run's tasks may take them for their own"};
}

Status remove_job_dir(int base_fd, std::uint32_t job_id)
{
  auto st = fs::remove_tree(base_fd, job_dir_name(job_id));
  if (::unlinkat(base_fd, keep_marker_name(job_id).c_str(), 0) != 0 && errno != ENOENT && st) {
    return Error::from_errno("cannot remove " + keep_marker_name(job_id));
  }
  return st;
}

std::optional<KeepMarker> read_keep_marker(int base_fd, const std::string& name)
{
  auto text = fs::read_small_file(base_fd, name, 256);
  if (!text) {
    return std::nullopt;
  }
  KeepMarker m;
  const char* p = text->data();
  const char* end = p + text->size();
  auto r = std::from_chars(p, end, m.until);
  if (r.ec != std::errc()) {
    return std::nullopt;
  }
  p = r.ptr;
  while (p < end && *p == ' ') {
    ++p;
  }
  std::from_chars(p, end, m.ino); // optional second field
  return m;
}

Status mark_kept(int base_fd, std::uint32_t job_id, std::time_t until)
{
  // Opened without crossing a mount (no stat by name): a job that mounted a FUSE filesystem on its
  // own directory cannot make the epilog wait on it.
  auto dir = fs::open_beneath(base_fd, job_dir_name(job_id), O_PATH | O_DIRECTORY);
  if (!dir) {
    return dir.error().code == EXDEV ? Error::io("cannot keep " + job_dir_name(job_id) + ": it is a mount point", EXDEV)
                                     : dir.error().with_context("cannot keep");
  }
  struct stat st {};
  if (::fstat(dir->get(), &st) != 0) {
    return Error::from_errno("cannot keep " + job_dir_name(job_id));
  }
  const std::string text = std::to_string(static_cast<long long>(until)) + " " + std::to_string(st.st_ino) + "\n";
  return fs::write_file_atomic(base_fd, keep_marker_name(job_id), text, 0644);
}

Status take_from_user(int dir_fd)
{
  if (::fchown(dir_fd, 0, 0) != 0 || ::fchmod(dir_fd, 0700) != 0) {
    return Error::from_errno("cannot take the directory from its user");
  }
  return ok_status();
}

Status take_from_user(int base_fd, const std::string& name)
{
  auto dir = fs::open_beneath(base_fd, name, O_RDONLY | O_DIRECTORY);
  if (!dir) {
    return dir.error().code == EXDEV ? Error::io(name + " is a mount point: not taken from its user", EXDEV)
                                     : dir.error().with_context("cannot take " + name + " from its user");
  }
  if (auto st = take_from_user(dir->get()); !st) {
    return st.error().with_context(name);
  }
  return ok_status();
}

Status hand_back(int dir_fd, const JobOwner& owner)
{
  if (owner.uid == 0) {
    return Error::refused("a directory is never handed to root as its job user");
  }
  if (::fchown(dir_fd, owner.uid, owner.gid) != 0 || ::fchmod(dir_fd, 0700) != 0) {
    return Error::from_errno("cannot hand the directory back to uid " + std::to_string(owner.uid));
  }
  return ok_status();
}

namespace {

// Taken away first; a mount point (EXDEV) or a missing directory is not an error here: the rename
// says what there is (on_job_end detached what the user left mounted; GC deals with the rest).
Status take_before_move(int base_fd, const std::string& name)
{
  auto st = take_from_user(base_fd, name);
  if (!st && st.error().code != EXDEV && st.error().code != ENOENT) {
    return st;
  }
  return ok_status();
}

} // namespace

Result<std::optional<std::string>> move_to_trash(int base_fd, std::uint32_t job_id)
{
  const std::string name = job_dir_name(job_id);
  if (auto taken = take_before_move(base_fd, name); !taken) {
    return taken.error();
  }
  const std::string trash = std::string(k_trash_prefix) + name + "." + unique_suffix();
  if (::renameat2(base_fd, name.c_str(), base_fd, trash.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno == ENOENT) {
      return std::optional<std::string>();
    }
    return Error::from_errno("cannot move " + name + " to the trash");
  }
  ::unlinkat(base_fd, keep_marker_name(job_id).c_str(), 0);
  return std::optional<std::string>(trash);
}

Result<std::optional<std::string>> move_to_stage_out(int base_fd, std::uint32_t job_id)
{
  const std::string name = job_dir_name(job_id);
  if (auto taken = take_before_move(base_fd, name); !taken) {
    return taken.error();
  }
  const std::string pending = std::string(k_stage_out_prefix) + name + "." + unique_suffix();
  if (::renameat2(base_fd, name.c_str(), base_fd, pending.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno == ENOENT) {
      return std::optional<std::string>();
    }
    return Error::from_errno("cannot move " + name + " aside for its stage-out");
  }
  ::unlinkat(base_fd, keep_marker_name(job_id).c_str(), 0);
  return std::optional<std::string>(pending);
}

std::optional<std::uint32_t> job_of_stage_out(const std::string& name)
{
  const std::string head = std::string(k_stage_out_prefix) + "job_";
  if (!name.starts_with(head) || name.find('/') != std::string::npos) { // a name in the base, never a path
    return std::nullopt;
  }
  const auto dot = name.find('.', head.size());
  if (dot == std::string::npos || dot == head.size()) {
    return std::nullopt;
  }
  std::uint32_t id = 0;
  for (std::size_t i = head.size(); i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9' || id > 400000000U) {
      return std::nullopt;
    }
    id = id * 10 + static_cast<std::uint32_t>(name[i] - '0');
  }
  return id;
}

std::string fresh_stage_out_name(std::uint32_t job_id)
{
  return std::string(k_stage_out_prefix) + job_dir_name(job_id) + "." + unique_suffix();
}

Status claim_stage_out(int base_fd, std::uint32_t job_id, const std::string& from, const std::string& to)
{
  if (job_of_stage_out(from) != job_id && from != job_dir_name(job_id)) {
    return Error::refused("\"" + from + "\" is not job " + std::to_string(job_id) + "'s directory");
  }
  if (job_of_stage_out(to) != job_id) {
    return Error::refused("\"" + to + "\" is not a stage-out name of job " + std::to_string(job_id));
  }
  if (::renameat2(base_fd, from.c_str(), base_fd, to.c_str(), RENAME_NOREPLACE) != 0) {
    return Error::from_errno("cannot move " + from + " aside for its stage-out");
  }
  return ok_status();
}

Result<std::string> renew_stage_out(int base_fd, std::uint32_t job_id, const std::string& from)
{
  const std::string to = fresh_stage_out_name(job_id);
  if (auto st = claim_stage_out(base_fd, job_id, from, to); !st) {
    return st.error();
  }
  return to;
}

Result<std::string> stage_out_to_trash(int base_fd, const std::string& pending)
{
  if (!job_of_stage_out(pending)) {
    return Error::refused("\"" + pending + "\" is not a stage-out directory name");
  }
  if (auto taken = take_before_move(base_fd, pending); !taken) {
    return taken.error();
  }
  const std::string trash = std::string(k_trash_prefix) + pending.substr(1) + "." + unique_suffix();
  if (::renameat2(base_fd, pending.c_str(), base_fd, trash.c_str(), RENAME_NOREPLACE) != 0) {
    return Error::from_errno("cannot move " + pending + " to the trash");
  }
  return trash;
}

std::string kept_record_name(const std::string& dir)
{
  return std::string(k_kept_record_prefix) + (dir.starts_with('.') ? dir.substr(1) : dir);
}

std::optional<std::string> dir_of_kept_record(const std::string& name)
{
  const std::string_view prefix = k_kept_record_prefix;
  if (!name.starts_with(prefix)) {
    return std::nullopt;
  }
  std::string rest = name.substr(prefix.size());
  if (rest.starts_with("stageout.")) {
    rest = "." + rest;
  }
  const bool job_dir = rest.starts_with("job_") && rest.size() > 4 && rest.size() <= 14 &&
                       rest.find_first_not_of("0123456789", 4) == std::string::npos;
  if (!job_of_stage_out(rest) && !job_dir) {
    return std::nullopt;
  }
  return rest;
}

Result<std::string> find_job_dir(const std::string& base_path, std::uint32_t job_id, uid_t uid)
{
  std::string path = base_path + "/" + job_dir_name(job_id);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    return Error::from_errno(path);
  }
  if (!S_ISDIR(st.st_mode)) {
    return Error{ErrorKind::refused, ENOTDIR, path + ": not a directory"};
  }
  if (st.st_uid != uid) {
    return Error{ErrorKind::refused, EPERM, path + ": owned by uid " + std::to_string(st.st_uid) + ", not the job user"};
  }
  return path;
}

Status check_node_name(const std::string& node)
{
  if (node.empty() || node == "." || node == ".." || node.find('/') != std::string::npos) {
    return Error::refused("unusable node name \"" + node + "\"");
  }
  return ok_status();
}

} // namespace stagehand::tmpdir
