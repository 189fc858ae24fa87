// prolog/epilog: directory work first, then the daemon, then (without it) bounded removal.
#include "stagehand/ipc/job_hooks.hpp"

#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/ipc/client.hpp"
#include "stagehand/util/process_wait.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace stagehand::ipc {

namespace {

CallOptions hook_options()
{
  CallOptions o;
  o.connect_deadline = k_hook_daemon_deadline;
  o.idle_deadline = k_hook_daemon_deadline;
  return o;
}

// Tells the daemon; a sentence saying how that went.
std::string tell_daemon(const Config& config, const std::string& node, const proto::Request& request, bool* taken)
{
  auto reply = call(expand_node(config.daemon.socket, node), request, hook_options());
  *taken = reply && !reply->error;
  if (!reply) {
    return "no daemon (" + reply.error().message + ")";
  }
  if (reply->error) {
    return "the daemon refused: " + reply->error->message;
  }
  return "daemon told";
}

// Removes the trash in a child killed at the deadline: a syscall stuck on a user's FUSE mount
// cannot hold the epilog past its budget.
std::string remove_bounded(const Config& config, const std::string& node, const std::string& trash,
                           std::chrono::milliseconds budget)
{
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    return "cannot remove " + trash + ": pipe failed";
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(p[0]);
    ::close(p[1]);
    return "cannot remove " + trash + ": fork failed";
  }
  if (pid == 0) {
    ::close(p[0]);
    std::string said = tmpdir::remove_trash(config, node, trash, budget);
    (void)!::write(p[1], said.data(), said.size());
    ::_exit(0);
  }
  ::close(p[1]);
  std::string said;
  const auto until = std::chrono::steady_clock::now() + budget + std::chrono::milliseconds(1000);
  char buf[512];
  bool stopped = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    struct pollfd pfd {p[0], POLLIN, 0};
    if (left.count() <= 0 || ::poll(&pfd, 1, static_cast<int>(left.count())) == 0) {
      stopped = true;
      said = "removal of " + trash + " stopped at its time budget; the rest stays in the trash";
      break;
    }
    ssize_t n = ::read(p[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;
    }
    said.append(buf, static_cast<std::size_t>(n));
  }
  ::close(p[0]);
  // Never an unbounded wait: a child blocked in a syscall outlives SIGKILL (it goes to the reaper).
  const std::string who = "the removal of " + trash;
  auto ended = stopped ? proc::kill_and_wait(pid, who)
                       : proc::wait_or_kill(pid, who, std::chrono::steady_clock::now() + std::chrono::seconds(2));
  if (!ended) {
    said += (said.empty() ? "" : "; ") + ended.error().message;
  }
  return said;
}

} // namespace

Result<std::string> job_start(const Config& config, const tmpdir::JobContext& job)
{
  auto made = tmpdir::on_job_start(config, job);
  if (!made) {
    return made.error();
  }
  bool taken = false;
  std::string said = tell_daemon(config, job.node, proto::RegisterJob{job.owner.job_id, job.owner.uid, job.owner.gid},
                                 &taken);
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
    std::string said = tell_daemon(config, job.node,
                                   proto::EndJob{job.owner.job_id, "", 0, *ended->pending, out->specs, out->fallback_dir},
                                   &taken);
    if (taken) {
      return ended->summary + "; " + said + ", it copies the stage-out entries";
    }
    auto r = stage_out(config, job, *out, *ended->pending, config.stage.out_budget);
    std::string line = r.said + "; " + ended->summary + "; " + said;
    if (r.outcome != CopyOutcome::complete) {
      return line + "; " + keep_results(config, job, *out, *ended->pending, r.reason(), r.copier); // never deleted
    }
    auto base_fd = tmpdir::open_base(config, job.node);
    auto trash = base_fd ? tmpdir::stage_out_to_trash(base_fd->get(), *ended->pending) : Result<std::string>(base_fd.error());
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

} // namespace stagehand::ipc
