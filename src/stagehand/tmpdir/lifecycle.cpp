// Job-start, step-start and job-end actions on the scratch directory.
#include "stagehand/tmpdir/lifecycle.hpp"
#include "stagehand/tmpdir/views.hpp"

#include "stagehand/fs/mounts.hpp"

#include "stagehand/fs/remove_tree.hpp"
#include "stagehand/fs/trusted_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <ctime>

namespace stagehand::tmpdir {

namespace {

std::string describe(const std::string& base, const JobContext& job)
{
  return base + "/" + job_dir_name(job.owner.job_id);
}

} // namespace

Result<std::string> base_path(const Config& config, const std::string& node)
{
  auto ok = check_node_name(node);
  if (!ok) {
    return ok.error();
  }
  return expand_node(config.tmpdir.base, node);
}

Result<UniqueFd> open_base(const Config& config, const std::string& node)
{
  auto base = base_path(config, node);
  return base ? fs::open_trusted_dir(*base, fs::CreateMissing::no) : Result<UniqueFd>(base.error());
}

Request effective_request(const Config& config, std::optional<Request> option)
{
  if (option) {
    return *option;
  }
  return config.tmpdir.by_default ? Request::create : Request::none;
}

Result<std::string> on_job_start(const Config& config, const JobContext& job)
{
  auto base = base_path(config, job.node);
  if (!base) {
    return base.error();
  }
  auto base_fd = fs::open_trusted_dir(*base, fs::CreateMissing::yes);
  if (!base_fd) {
    return base_fd.error();
  }
  // Before the directory: no task of this run can have views yet (views_for needs the directory).
  const Status views = discard_earlier_views(base_fd->get(), job.owner.job_id);
  auto created = create_job_dir(base_fd->get(), job.owner);
  if (!created) {
    return created.error();
  }
  std::string what = *created == CreateOutcome::replaced_stale ? "created (a stale entry moved to the trash) " : "created ";
  what += describe(*base, job);
  if (!views) {
    what += " (" + views.error().message + ")";
  }
  return what;
}

namespace {

// The job is over: its directory is taken from the user first (nothing more can be mounted on
// it), then whatever the user left mounted on it or below it is detached, here in the node's own
// mount namespace (the epilog's; a daemon under its unit has a namespace of its own, where a
// detach frees nothing on the node). A directory that was itself a mount point is taken once
// uncovered (by the move). Returns a sentence for the epilog's line ("" when nothing was mounted);
// what cannot be detached is left to GC, which says so.
std::string detach_left_mounts(const std::string& base, int base_fd, const std::string& name, bool views)
{
  (void)take_from_user(base_fd, name); // a mount point (EXDEV) or no directory: the move says
  auto detached = fs::detach_mounts_below(base_fd, name);
  if (!detached) {
    return "could not detach what the user left mounted in " + base + "/" + name + " (" + detached.error().message +
           "; GC retries); ";
  }
  if (detached->empty()) {
    return "";
  }
  std::string line = "detached " + std::to_string(detached->size()) +
                     (views ? " mount(s) (the job's cache views, and any the user left):" : " mount(s) the user left:");
  for (const auto& point : *detached) {
    line += " " + base + "/" + point;
  }
  return line + "; ";
}

} // namespace

Result<JobEnd> on_job_end(const Config& config, const JobContext& job, Request request, EndMove move)
{
  auto base = base_path(config, job.node);
  if (!base) {
    return base.error();
  }
  auto base_fd = fs::open_trusted_dir(*base, fs::CreateMissing::no);
  if (!base_fd) {
    if (base_fd.error().code == ENOENT) {
      return JobEnd{"no base directory, nothing to remove", std::nullopt, 0, std::nullopt};
    }
    return base_fd.error();
  }
  if (request == Request::keep) {
    // Not taken from the user: SPEC and the README promise a kept directory to its user for
    // keep_for (to copy results out or debug). GC takes it away, and detaches any mount the user
    // left on it or below it, when keep_for is up, before removing it. Every other end (trash,
    // stage-out) takes it away first (move_to_trash, move_to_stage_out).
    std::time_t until = std::time(nullptr) + static_cast<std::time_t>(config.tmpdir.keep_for.count());
    auto st = mark_kept(base_fd->get(), job.owner.job_id, until);
    if (!st) {
      return st.error();
    }
    return JobEnd{"kept " + describe(*base, job) + " for " + std::to_string(config.tmpdir.keep_for.count()) + "s",
                  std::nullopt, static_cast<std::int64_t>(until), std::nullopt};
  }
  struct stat views_st {};
  const bool views = ::fstatat(base_fd->get(), (std::string(k_views_dir) + "/" + job_views_name(job.owner.job_id)).c_str(),
                               &views_st, AT_SYMLINK_NOFOLLOW) == 0;
  std::string detached = detach_left_mounts(*base, base_fd->get(), job_dir_name(job.owner.job_id), views);
  // The cache views are detached with the rest: their upper/work directories (root's) go now
  // (left to GC when something below the job's directory could not be detached).
  const bool all_detached = !detached.starts_with("could not detach");
  if (auto removed = all_detached ? remove_job_views(base_fd->get(), job.owner.job_id) : ok_status(); !removed) {
    detached += "could not remove " + *base + "/" + k_views_dir + "/" + job_views_name(job.owner.job_id) + " (" +
                removed.error().message + "; GC retries); ";
  }
  if (move == EndMove::to_stage_out) {
    auto pending = move_to_stage_out(base_fd->get(), job.owner.job_id);
    if (!pending) {
      return pending.error();
    }
    if (!*pending) {
      return JobEnd{"no directory " + describe(*base, job), std::nullopt, 0, std::nullopt};
    }
    return JobEnd{detached + "moved " + describe(*base, job) + " aside for its stage-out", std::nullopt, 0, *pending};
  }
  auto trash = move_to_trash(base_fd->get(), job.owner.job_id);
  if (!trash) {
    return trash.error();
  }
  if (!*trash) {
    return JobEnd{"no directory " + describe(*base, job), std::nullopt, 0, std::nullopt};
  }
  return JobEnd{detached + "moved " + describe(*base, job) + " to the trash", *trash, 0, std::nullopt};
}

std::string remove_trash(const Config& config, const std::string& node, const std::string& trash,
                         std::chrono::milliseconds budget)
{
  auto base = base_path(config, node);
  if (!base) {
    return base.error().message;
  }
  auto base_fd = fs::open_trusted_dir(*base, fs::CreateMissing::no);
  if (!base_fd) {
    return base_fd.error().message;
  }
  fs::RemoveStats stats;
  auto st = fs::remove_tree_until(base_fd->get(), trash, std::chrono::steady_clock::now() + budget, &stats);
  if (!st) {
    return "removed " + std::to_string(stats.removed) + " entries of " + *base + "/" + trash + ", " +
           st.error().message;
  }
  return "removed " + *base + "/" + trash + " (" + std::to_string(stats.removed) + " entries)";
}

} // namespace stagehand::tmpdir
