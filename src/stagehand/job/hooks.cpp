// prolog/epilog: directory work first, then the daemon, then (without it) bounded removal.
#include "stagehand/job/hooks.hpp"

#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/ipc/client.hpp"
#include "stagehand/util/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

namespace stagehand::job {

namespace {

ipc::CallOptions hook_options()
{
  ipc::CallOptions o;
  o.connect_deadline = k_hook_daemon_deadline;
  o.idle_deadline = k_hook_daemon_deadline;
  return o;
}

// Tells the daemon; a sentence saying how that went.
// What the daemon's answer must say for `taken`: anything that is not an error, or (a stage-out's
// hand-over) that it took the stage-out. `asked`, when given: false where the request could not be
// sent at all (a path that is not valid UTF-8).
enum class Taken { when_answered, when_stage_out_taken };

std::string tell_daemon(const Config& config, const std::string& node, const proto::Request& request, bool* taken,
                        Taken means = Taken::when_answered, bool* asked = nullptr)
{
  auto reply = ipc::call(expand_node(config.daemon.socket, node), request, hook_options());
  *taken = false;
  if (asked) {
    *asked = reply || reply.error().code != EILSEQ;
  }
  if (!reply) {
    return (reply.error().code == EILSEQ ? "the daemon not asked (" : "no daemon (") + reply.error().message + ")";
  }
  if (reply->error) {
    return "the daemon refused: " + reply->error->message;
  }
  if (means == Taken::when_stage_out_taken && !proto::parse_stage_out_taken(reply->result_json)) {
    return "the daemon answered without taking the stage-out (a daemon older than this epilog)";
  }
  *taken = true;
  return "daemon told";
}

// Removes the trash in a child killed at the deadline: a syscall stuck on a user's FUSE mount
// cannot hold the epilog past its budget.
std::string remove_bounded(const Config& config, const std::string& node, const std::string& trash,
                           std::chrono::milliseconds budget)
{
  auto removed = proc::run_function([&] { return tmpdir::remove_trash(config, node, trash, budget); },
                                    "the removal of " + trash,
                                    proc::Clock::now() + budget + std::chrono::milliseconds(1000),
                                    proc::OnTimeout::ended);
  if (!removed) {
    return "cannot remove " + trash + ": " + removed.error().message;
  }
  if (!removed->timed_out()) {
    return removed->output;
  }
  // Never an unbounded wait: a child blocked in a syscall outlives SIGKILL (it went to the reaper).
  return "removal of " + trash + " stopped at its time budget; the rest stays in the trash" +
         (removed->left_behind.empty() ? std::string() : "; " + removed->left_behind);
}

} // namespace

Result<std::string> job_start(const Config& config, const tmpdir::JobContext& job, stage::StagingAsked staging)
{
  auto made = tmpdir::on_job_start(config, job);
  if (!made) {
    return made.error();
  }
  bool taken = false;
  const proto::RegisterJob registered{job.owner.job_id, job.owner.uid, job.owner.gid, staging};
  std::string said = tell_daemon(config, job.node, registered, &taken);
  return *made + "; " + said;
}

Result<std::string> job_end(const Config& config, const tmpdir::JobContext& job, tmpdir::Request request,
                            std::chrono::milliseconds budget, const std::optional<StageOutJob>& out)
{
  std::string copied;
  bool kept_aside = false;
  if (out && request == tmpdir::Request::keep) {
    const std::string dir = tmpdir::job_dir_name(job.owner.job_id);
    auto r = stage_out(config, job, *out, dir, config.stage.out_budget);
    copied = r.said + "; ";
    if (r.outcome != CopyOutcome::complete) {
      // Kept under a stage-out name of their own, not in job_<id>: a requeued run's prolog would
      // replace that, and its keep marker could expire before the record.
      auto base_fd = tmpdir::open_base(config, job.node);
      auto aside = base_fd ? tmpdir::renew_stage_out(base_fd->get(), job.owner.job_id, dir) : Result<std::string>(base_fd.error());
      copied += keep_results(config, job, *out, aside ? *aside : dir, r.reason(), r.copier) + "; ";
      kept_aside = static_cast<bool>(aside);
    }
  }
  // Kept aside: job_<id> is gone, and the job ends here as one without a directory.
  const tmpdir::Request end_request = kept_aside ? tmpdir::Request::create : request;
  const bool hand_over = out && end_request != tmpdir::Request::keep && !kept_aside;
  auto ended =
    tmpdir::on_job_end(config, job, end_request, hand_over ? tmpdir::EndMove::to_stage_out : tmpdir::EndMove::to_trash);
  if (!ended) {
    return ended.error().with_context(copied.empty() ? copied : copied.substr(0, copied.size() - 2));
  }
  if (ended->pending) {
    // The daemon copies after the job (the directory stays until it is done); without it, the
    // epilog copies within [stage] out_budget, then the directory goes to the trash.
    bool taken = false;
    bool asked = true;
    std::string said = tell_daemon(config, job.node,
                                   proto::EndJob{job.owner.job_id, "", 0, *ended->pending, out->specs, out->fallback_dir},
                                   &taken, Taken::when_stage_out_taken, &asked);
    if (taken) {
      return ended->summary + "; " + said + ", it copies the stage-out entries";
    }
    if (!asked) { // the stage-out's paths could not travel; the job's end can (its entries are unpinned)
      bool told = false;
      const std::string end = tell_daemon(config, job.node, proto::EndJob{job.owner.job_id, "", 0, "", "", ""}, &told);
      said += "; " + (told ? std::string("the job's end told to the daemon") : end);
    }
    // Claimed first, as the daemon claims what it takes: a daemon that answered too late (stuck,
    // then woken) has renamed it, and copies it alone. Not renamed for another reason (which the
    // copy would likely meet too): copied where it is.
    auto base_fd = tmpdir::open_base(config, job.node);
    if (base_fd) {
      auto claimed = tmpdir::renew_stage_out(base_fd->get(), job.owner.job_id, *ended->pending);
      if (!claimed && claimed.error().code == ENOENT) {
        return ended->summary + "; " + said + "; the node daemon took the stage-out after all, it copies the entries";
      }
      if (claimed) {
        *ended->pending = *claimed;
      }
    }
    const std::string pending = *ended->pending;
    auto r = stage_out(config, job, *out, pending, config.stage.out_budget);
    std::string line = r.said + "; " + ended->summary + "; " + said;
    if (r.outcome != CopyOutcome::complete) {
      return line + "; " + keep_results(config, job, *out, pending, r.reason(), r.copier); // never deleted
    }
    auto trash = base_fd ? tmpdir::stage_out_to_trash(base_fd->get(), pending) : Result<std::string>(base_fd.error());
    if (!trash) {
      return line + "; " + trash.error().message;
    }
    return line + "; " + remove_bounded(config, job.node, *trash, budget);
  }
  bool taken = false;
  std::string said = tell_daemon(
    config, job.node, proto::EndJob{job.owner.job_id, ended->trash.value_or(""), ended->keep_until, "", "", ""}, &taken);
  std::string line = copied + ended->summary + "; " + said;
  if (ended->trash && !taken) {
    line += "; " + remove_bounded(config, job.node, *ended->trash, budget);
  }
  return line;
}

} // namespace stagehand::job
