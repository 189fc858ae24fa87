// --stage-out in the epilog: open the job's directory as root, copy as the job user in a child.
#include "stagehand/job/stage_out.hpp"

#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/ipc/child.hpp"
#include "stagehand/stageout/copy.hpp"
#include "stagehand/stageout/kept.hpp"
#include "stagehand/stageout/spec.hpp"
#include "stagehand/util/process_wait.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <functional>
#include <optional>

namespace stagehand::job {

namespace {

using Clock = std::chrono::steady_clock;

// Every entry this node copies, as the calling user (the child, or a user's own retry), one line
// (its summary) each to `say`, which returns false to stop. First character: '+' copied
// completely, '-' not.
bool copy_entries(int dir_fd, const std::vector<stageout::OutSpec>& specs, const tmpdir::JobContext& job,
                  const StageOutJob& out, Clock::time_point until, const std::function<bool(const std::string&)>& say)
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
    std::string line = std::string(r.error.empty() ? "+" : "-") + stageout::summary(r) +
                       (log.empty() ? " (no log file could be written)" : " (logged in " + log + ")");
    if (!say(line)) {
      return false;
    }
  }
  return true;
}

// The child: every entry this node copies, one message each.
int copy_all(int sock, int dir_fd, const std::vector<stageout::OutSpec>& specs, const tmpdir::JobContext& job,
             const StageOutJob& out, Clock::time_point until)
{
  return copy_entries(dir_fd, specs, job, out, until, [&](const std::string& line) { return !!ipc::send_message(sock, line); })
           ? 0
           : 1;
}

// The child: the kept line in the log of each of this node's entries, once per log file.
int log_kept(int sock, int dir_fd, const std::vector<stageout::OutSpec>& specs, const tmpdir::JobContext& job,
             const StageOutJob& out, const std::string& line)
{
  const bool first_node = stageout::is_first_node(dir_fd);
  std::vector<std::string> written;
  for (const auto& spec : specs) {
    if (!first_node && !stageout::per_node(spec)) {
      continue;
    }
    auto dirs = stageout::log_dirs_of(stageout::dest_path(spec, "/", job.owner.job_id, job.node));
    dirs.push_back(out.fallback_dir);
    bool already = false;
    for (const auto& d : dirs) {
      already = already || std::find(written.begin(), written.end(), d + "/" + stageout::k_log_name) != written.end();
    }
    if (!already) {
      written.push_back(stageout::append_log_line(dirs, job.owner.job_id, job.node, line));
    }
  }
  if (written.empty()) { // nothing for this node's entries: the submit directory hears of it
    stageout::append_log_line({out.fallback_dir}, job.owner.job_id, job.node, line);
  }
  (void)ipc::send_message(sock, "done");
  return 0;
}

// How long writing the kept line to the user's logs may take.
constexpr std::chrono::milliseconds k_log_budget{20000};

// While in scope, and if `on`: the job's directory handed back to its user for the copy; taken
// from them again (tmpdir::take_from_user, through the same fd) when it goes.
struct Retake
{
  int fd;
  bool on;
  ~Retake()
  {
    if (on) {
      (void)tmpdir::take_from_user(fd);
    }
  }
};

// What the copying child says, one message per entry, until it closes its end or `until` passes
// (then it is killed), and how it ended: stage_out's result.
StageOutResult collect_copy(ipc::Child& child, Clock::time_point until)
{
  std::string said;
  CopyOutcome outcome = CopyOutcome::complete;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
    if (left.count() <= 0) {
      child.kill();
      outcome = CopyOutcome::failed;
      said += (said.empty() ? "" : "; ") + std::string("stopped at the time budget; the rest was not copied");
      break;
    }
    auto msg = ipc::receive_message(child.sock(), left);
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
  auto ended = child.wait();
  if (!ended || *ended != 0) {
    outcome = CopyOutcome::failed;
    said += (said.empty() ? "" : "; ") + std::string("the copying process ended badly") +
            (ended ? "" : " (" + ended.error().message + ")");
  }
  const Copier copier = !ended && proc::left_behind(ended.error()) ? Copier::stuck : Copier::ended;
  if (said.empty()) {
    said = "nothing to copy on this node (not the job's first node)";
  }
  return StageOutResult{"stage-out: " + said, outcome, copier};
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
  auto base_fd = tmpdir::open_base(config, job.node);
  if (!base_fd) {
    return failed("nothing copied: " + base_fd.error().message);
  }
  const std::string& name = dir_name;
  // Never across a mount the job left on its directory (a FUSE server there could hang root).
  auto opened = fs::open_beneath(base_fd->get(), name, O_RDONLY | O_DIRECTORY);
  UniqueFd dir = opened ? std::move(*opened) : UniqueFd();
  struct stat st {};
  // The job user's, or taken from them at job end (root's: tmpdir::take_from_user).
  if (!dir.valid() || ::fstat(dir.get(), &st) != 0 || (st.st_uid != job.owner.uid && st.st_uid != 0) ||
      job.owner.uid == 0) {
    return failed("nothing copied: no scratch directory " + *base + "/" + name + " of the job user" +
                  (opened ? std::string() : " (" + opened.error().message + ")"));
  }
  auto creds = ipc::credentials_of(job.owner.uid, job.owner.gid);
  if (!creds) {
    return failed("nothing copied: " + creds.error().message);
  }
  // The copy runs as the user through this fd, and openat below a root 0700 directory fails for
  // them: handed back for the copy's time only, and taken away again through the same fd after.
  const bool taken = st.st_uid == 0;
  if (taken) {
    if (auto back = tmpdir::hand_back(dir.get(), job.owner); !back) {
      return failed("nothing copied: " + back.error().message);
    }
  }
  const Retake retake{dir.get(), taken};
  // The child stops itself a little before the budget, so it can still say what it copied.
  const auto started = Clock::now();
  const auto child_until = started + budget * 9 / 10;
  const auto parent_until = started + budget;
  auto child = ipc::spawn_as(*creds, {dir.get()}, [&](int sock, const std::vector<int>& kept) {
    return copy_all(sock, kept.at(0), *specs, job, out, child_until);
  });
  if (!child) {
    return failed("nothing copied: " + child.error().message);
  }
  return collect_copy(*child, parent_until);
}

std::string keep_results(const Config& config, const tmpdir::JobContext& job, const StageOutJob& out,
                         const std::string& dir_name, const std::string& reason, Copier copier)
{
  auto base = tmpdir::base_path(config, job.node);
  auto base_fd = tmpdir::open_base(config, job.node);
  if (!base_fd) {
    return "stage-out could not complete (" + reason + "); its results stay where they are: " +
           base_fd.error().message;
  }
  stageout::KeptResults k;
  k.job_id = job.owner.job_id;
  k.uid = job.owner.uid;
  k.gid = job.owner.gid;
  k.dir = dir_name;
  k.specs = out.specs;
  k.fallback_dir = out.fallback_dir;
  k.until = static_cast<std::int64_t>(std::time(nullptr)) + static_cast<std::int64_t>(config.tmpdir.keep_for.count());
  k.reason = reason;
  std::string line = stageout::kept_line(k, *base, job.node);
  if (auto saved = stageout::save_kept(base_fd->get(), k); !saved) {
    // Without a record the results still stay: GC records a ".stageout." directory no copy runs for
    // as a stray once 2 x out_budget + 30 min have passed, and removes it keep_for after that.
    line += " (its record could not be written: " + saved.error().message +
            "; garbage collection records it later, and removes it keep_for after that)";
  }
  auto specs = stageout::parse_option(out.specs);
  auto opened = fs::open_beneath(base_fd->get(), dir_name, O_RDONLY | O_DIRECTORY);
  UniqueFd dir = opened ? std::move(*opened) : UniqueFd();
  auto creds = ipc::credentials_of(job.owner.uid, job.owner.gid);
  struct stat st {};
  // Kept for their user, as a --tmpdir=keep directory is: theirs to read and to retry without the
  // daemon (`stagehand stage-out retry`) until keep_for, when GC takes them away and removes them.
  if (dir.valid() && ::fstat(dir.get(), &st) == 0 && st.st_uid == 0 && job.owner.uid != 0) {
    if (auto back = tmpdir::hand_back(dir.get(), job.owner); !back) {
      line += " (" + back.error().message + ")";
    } else {
      st.st_uid = job.owner.uid;
    }
  }
  if (copier == Copier::stuck) {
    return line + " (not written to the job's log: the copy was stuck on a filesystem that does not answer)";
  }
  if (specs && dir.valid() && creds && st.st_uid == job.owner.uid && st.st_uid != 0) {
    auto child = ipc::spawn_as(*creds, {dir.get()}, [&](int sock, const std::vector<int>& kept) {
      return log_kept(sock, kept.at(0), *specs, job, out, line);
    });
    if (child) {
      dir.reset();
      // Bounded: a log on a hung filesystem, or a stopped child, must not hold the epilog or daemon.
      if (ipc::receive_message(child->sock(), k_log_budget)) {
        (void)child->wait();
      } else {
        child->kill();
        line += " (not written to the job's log: it did not answer within " +
                std::to_string(k_log_budget.count() / 1000) + " s)";
      }
    }
  }
  return line;
}

namespace {

// Results kept in the job's own directory (its move aside failed) are never retried: that name may
// be a later (requeued) run's running directory, or a --tmpdir=keep one. Why not, or nullopt.
std::optional<std::string> in_job_dir(const stageout::KeptResults& k, const std::string& base)
{
  if (tmpdir::job_of_stage_out(k.dir)) {
    return std::nullopt;
  }
  return "the results were kept in " + base + "/" + k.dir +
         ", the job's own directory, which a later run of the job replaces: not retried (copy what is still "
         "there by hand)";
}

} // namespace

Result<std::string> retry_kept(const Config& config, const std::string& node, std::uint32_t job_id, uid_t requester,
                               std::chrono::milliseconds budget)
{
  auto base = tmpdir::base_path(config, node);
  auto base_fd = tmpdir::open_base(config, node);
  if (!base_fd) {
    return base_fd.error();
  }
  std::vector<stageout::KeptResults> mine;
  bool others = false;
  for (auto& k : stageout::load_kept(base_fd->get())) {
    if (k.job_id != job_id) {
      continue;
    }
    if (requester != 0 && k.uid != requester) {
      others = true;
      continue;
    }
    mine.push_back(std::move(k));
  }
  if (mine.empty()) {
    return Error::refused(others ? "job " + std::to_string(job_id) + " is not yours"
                                 : "no stage-out results of job " + std::to_string(job_id) + " are kept on node " + node);
  }
  std::string said;
  bool complete = true;
  for (auto& k : mine) {
    if (auto own = in_job_dir(k, *base)) {
      complete = false;
      said += (said.empty() ? "" : "; ") + *own;
      continue;
    }
    // First a name only this retry knows, its record written before: a second retry, or GC that
    // decided on the old name, finds nothing there. The clock restarts for the copy's time.
    const std::string old_dir = k.dir;
    k.until = std::max<std::int64_t>(k.until, std::time(nullptr) + std::chrono::duration_cast<std::chrono::seconds>(budget).count() + 3600);
    auto renewed = tmpdir::renew_stage_out(base_fd->get(), k.job_id, old_dir);
    if (!renewed) {
      complete = false;
      said += (said.empty() ? "" : "; ") + std::string("another retry or garbage collection has ") + *base + "/" + old_dir +
              " (" + renewed.error().message + ")";
      continue;
    }
    k.dir = *renewed;
    if (auto saved = stageout::save_kept(base_fd->get(), k); !saved) {
      said += (said.empty() ? "" : "; ") + saved.error().message;
    }
    stageout::remove_kept(base_fd->get(), old_dir);
    const tmpdir::JobContext job{tmpdir::JobOwner{k.job_id, k.uid, k.gid}, node};
    const StageOutJob out{k.specs, k.fallback_dir};
    auto r = stage_out(config, job, out, k.dir, budget);
    said += (said.empty() ? "" : "; ") + r.said;
    if (r.outcome != CopyOutcome::complete) {
      complete = false;
      k.reason = r.reason();
      k.until = static_cast<std::int64_t>(std::time(nullptr)) + static_cast<std::int64_t>(config.tmpdir.keep_for.count());
      (void)stageout::save_kept(base_fd->get(), k);
      said += "; " + stageout::kept_line(k, *base, node);
      continue;
    }
    auto trash = tmpdir::stage_out_to_trash(base_fd->get(), k.dir);
    if (!trash) { // copied, but still there: its record stays with it (GC removes both at `until`)
      complete = false;
      said += "; " + trash.error().message;
      continue;
    }
    stageout::remove_kept(base_fd->get(), k.dir);
    said += "; " + tmpdir::remove_trash(config, node, *trash, std::chrono::minutes(10));
  }
  if (!complete) {
    return Error::io(said, EIO);
  }
  return said;
}

Result<std::string> retry_kept_as_self(const Config& config, const std::string& node, std::uint32_t job_id,
                                       std::chrono::milliseconds budget)
{
  const uid_t me = ::getuid();
  auto base = tmpdir::base_path(config, node);
  auto base_fd = tmpdir::open_base(config, node);
  if (!base_fd) {
    return base_fd.error();
  }
  std::string said;
  bool found = false;
  bool complete = true;
  for (const auto& k : stageout::load_kept(base_fd->get())) {
    if (k.job_id != job_id || k.uid != me) {
      continue;
    }
    found = true;
    if (auto own = in_job_dir(k, *base)) {
      complete = false;
      said += (said.empty() ? "" : "; ") + *own;
      continue;
    }
    auto specs = stageout::parse_option(k.specs);
    auto opened = fs::open_beneath(base_fd->get(), k.dir, O_RDONLY | O_DIRECTORY);
    UniqueFd dir = opened ? std::move(*opened) : UniqueFd();
    struct stat st {};
    if (!specs || !dir.valid() || ::fstat(dir.get(), &st) != 0 || st.st_uid != me) {
      complete = false;
      said += (said.empty() ? "" : "; ") + std::string("cannot read ") + *base + "/" + k.dir;
      continue;
    }
    const tmpdir::JobContext job{tmpdir::JobOwner{k.job_id, k.uid, k.gid}, node};
    copy_entries(dir.get(), *specs, job, StageOutJob{k.specs, k.fallback_dir}, Clock::now() + budget,
                 [&](const std::string& line) {
                   complete = complete && !line.empty() && line[0] == '+';
                   said += (said.empty() ? "" : "; ") + line.substr(1);
                   return true;
                 });
    if (complete) {
      said += "; the copy on the node stays until " + stageout::until_text(k) +
              " (only root or stagehandd may remove it)";
    }
  }
  if (!found) {
    return Error::refused("no stage-out results of job " + std::to_string(job_id) + " of yours are kept on node " + node);
  }
  if (!complete) {
    return Error::io(said, EIO);
  }
  return said;
}

} // namespace stagehand::job
