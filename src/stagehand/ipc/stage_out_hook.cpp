// --stage-out in the epilog: open the job's directory as root, copy as the job user in a child.
#include "stagehand/ipc/stage_out_hook.hpp"

#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/ipc/child.hpp"
#include "stagehand/stageout/copy.hpp"
#include "stagehand/stageout/spec.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace stagehand::ipc {

namespace {

using Clock = std::chrono::steady_clock;

// The child: every entry this node copies, one message (its summary) each.
int copy_all(int sock, int dir_fd, const std::vector<stageout::OutSpec>& specs, const tmpdir::JobContext& job,
             const StageOutJob& out, Clock::time_point until)
{
  // Read as the job user: the marker is the job's own word, and only decides what it gets.
  const bool first_node = stageout::is_first_node(dir_fd);
  for (const auto& spec : specs) {
    if (!first_node && !stageout::per_node(spec)) {
      continue;
    }
    const std::string dest = stageout::dest_path(spec, "/", job.owner.job_id, job.node);
    auto r = stageout::copy_entry(dir_fd, spec, dest, until);
    const std::string log = stageout::append_log(r, out.fallback_dir, job.owner.job_id, job.node);
    // First character: '+' copied completely, '-' not.
    std::string line = std::string(r.error.empty() ? "+" : "-") + stageout::summary(r) +
                       (log.empty() ? " (no log file could be written)" : " (logged in " + log + ")");
    if (!send_message(sock, line)) {
      return 1;
    }
  }
  return 0;
}

} // namespace

StageOutResult stage_out(const Config& config, const tmpdir::JobContext& job, const StageOutJob& out,
                         const std::string& dir_name, std::chrono::milliseconds budget)
{
  auto failed = [](const std::string& why) { return StageOutResult{"stage-out: " + why, CopyOutcome::failed}; };
  auto specs = stageout::parse_option(out.specs);
  if (!specs) {
    return failed(specs.error().message);
  }
  auto base = tmpdir::base_path(config, job.node);
  auto base_fd = base ? fs::open_trusted_dir(*base, fs::CreateMissing::no) : Result<UniqueFd>(base.error());
  if (!base_fd) {
    return failed("nothing copied: " + base_fd.error().message);
  }
  const std::string& name = dir_name;
  UniqueFd dir(::openat(base_fd->get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!dir.valid() || ::fstat(dir.get(), &st) != 0 || st.st_uid != job.owner.uid || st.st_uid == 0) {
    return failed("nothing copied: no scratch directory " + *base + "/" + name + " owned by the job user");
  }
  auto creds = credentials_of(job.owner.uid, job.owner.gid);
  if (!creds) {
    return failed("nothing copied: " + creds.error().message);
  }
  // The child stops itself a little before the budget, so it can still say what it copied.
  const auto started = Clock::now();
  const auto child_until = started + budget * 9 / 10;
  const auto parent_until = started + budget;
  auto child = spawn_as(*creds, {dir.get()}, [&](int sock, const std::vector<int>& kept) {
    return copy_all(sock, kept.at(0), *specs, job, out, child_until);
  });
  if (!child) {
    return failed("nothing copied: " + child.error().message);
  }
  dir.reset();
  std::string said;
  CopyOutcome outcome = CopyOutcome::complete;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(parent_until - Clock::now());
    if (left.count() <= 0) {
      child->kill();
      outcome = CopyOutcome::failed;
      said += (said.empty() ? "" : "; ") + std::string("stopped at the time budget; the rest was not copied");
      break;
    }
    auto msg = receive_message(child->sock(), left);
    if (!msg && msg.error().code == ETIMEDOUT) {
      continue; // the next turn stops it
    }
    if (!msg) {
      break; // done: the child closed its end
    }
    if (msg->text.empty() || msg->text[0] != '+') {
      outcome = CopyOutcome::failed;
    }
    said += (said.empty() ? "" : "; ") + (msg->text.empty() ? msg->text : msg->text.substr(1));
  }
  auto ended = child->wait();
  if (!ended || *ended != 0) {
    outcome = CopyOutcome::failed;
    said += (said.empty() ? "" : "; ") + std::string("the copying process ended badly") +
            (ended ? "" : " (" + ended.error().message + ")");
  }
  return StageOutResult{"stage-out: " + (said.empty() ? std::string("nothing to copy on this node (not the job's first node)") : said),
                        outcome};
}

} // namespace stagehand::ipc
