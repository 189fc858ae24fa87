// Job-start, step-start and job-end actions on the scratch directory.
#include "stagehand/tmpdir/lifecycle.hpp"

#include "stagehand/fs/trusted_dir.hpp"

#include <ctime>

namespace stagehand::tmpdir {

namespace {

std::string describe(const std::string& base, const JobContext& job)
{
  return base + "/" + job_dir_name(job.owner.job_id);
}

std::string gc_summary(const GcResult& gc)
{
  std::string s;
  if (!gc.removed.empty()) {
    s += "; removed " + std::to_string(gc.removed.size()) + " expired entr" + (gc.removed.size() == 1 ? "y" : "ies");
  }
  if (!gc.errors.empty()) {
    s += "; gc error: " + gc.errors.front().message;
  }
  return s;
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
  auto gc = remove_expired(base_fd->get(), std::time(nullptr), DryRun::no);
  auto created = create_job_dir(base_fd->get(), job.owner);
  if (!created) {
    return created.error();
  }
  std::string what = *created == CreateOutcome::replaced_stale ? "created (replacing a stale entry) " : "created ";
  return what + describe(*base, job) + gc_summary(gc);
}

Result<std::string> on_job_end(const Config& config, const JobContext& job, Request request)
{
  auto base = base_path(config, job.node);
  if (!base) {
    return base.error();
  }
  auto base_fd = fs::open_trusted_dir(*base, fs::CreateMissing::no);
  if (!base_fd) {
    if (base_fd.error().code == ENOENT) {
      return std::string("no base directory, nothing to remove");
    }
    return base_fd.error();
  }
  if (request == Request::keep) {
    std::time_t until = std::time(nullptr) + static_cast<std::time_t>(config.tmpdir.keep_for.count());
    auto st = mark_kept(base_fd->get(), job.owner.job_id, until);
    if (!st) {
      return st.error();
    }
    return "kept " + describe(*base, job) + " for " + std::to_string(config.tmpdir.keep_for.count()) + "s";
  }
  auto st = remove_job_dir(base_fd->get(), job.owner.job_id);
  auto gc = remove_expired(base_fd->get(), std::time(nullptr), DryRun::no);
  if (!st) {
    return st.error();
  }
  return "removed " + describe(*base, job) + gc_summary(gc);
}

} // namespace stagehand::tmpdir
