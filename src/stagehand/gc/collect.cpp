// Base snapshot, running-job evidence, plan application.
#include "stagehand/gc/collect.hpp"

#include "stagehand/fs/atomic_file.hpp"
#include "stagehand/fs/dir_stream.hpp"
#include "stagehand/fs/mounts.hpp"
#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/fs/remove_tree.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/stageout/kept.hpp"
#include "stagehand/stageout/pending.hpp"
#include "stagehand/tmpdir/job_dir.hpp"
#include "stagehand/tmpdir/views.hpp"
#include "stagehand/util/fd.hpp"
#include "stagehand/util/strings.hpp"
#include "stagehand/util/subprocess.hpp"
#include "stagehand/util/units.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <limits>
#include <random>

namespace stagehand::gc {

namespace {

std::string aside_name(const std::string& name)
{
  static std::atomic<unsigned> counter{0};
  std::random_device rd;
  return ".trash." + name + ".gc." + std::to_string(::getpid()) + "." + std::to_string(counter++) + "." +
         std::to_string(rd() & 0xffff);
}

} // namespace

Result<Snapshot> snapshot_base(int base_fd, std::int64_t now)
{
  Snapshot s;
  s.now = now;
  fs::DirStream d = fs::open_dir_stream(base_fd);
  if (!d) {
    return Error::from_errno("cannot read the base directory");
  }
  struct Listed
  {
    std::string name;
    bool dir;
    std::uint64_t ino;
  };
  std::vector<Listed> listed;
  while (struct dirent* e = ::readdir(d.get())) {
    std::string n = e->d_name;
    if (n != "." && n != "..") {
      listed.push_back(Listed{std::move(n), e->d_type == DT_DIR, e->d_ino});
    }
  }
  for (const auto& l : listed) {
    const std::string& name = l.name;
    // No stat by name: a user's FUSE mount on their job directory would be asked, and could hang.
    auto fd = fs::open_beneath(base_fd, name, O_PATH);
    if (!fd) {
      if (fd.error().code == EXDEV) {
        // Known from readdir alone (the directory's own inode, under the mount): no owner, no age.
        s.mount_points.push_back(name);
        BaseEntry m{name, l.dir, 0, 0, l.ino};
        m.mounted = Mounted::yes;
        s.entries.push_back(std::move(m));
      }
      continue; // gone meanwhile
    }
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0) {
      continue;
    }
    // Age by mtime: a prolog's fresh directory is young whatever else happened to it.
    s.entries.push_back(BaseEntry{name, S_ISDIR(st.st_mode), st.st_uid, st.st_mtim.tv_sec, st.st_ino, st.st_ctim.tv_sec});
    if (auto dir = tmpdir::dir_of_kept_record(name); dir && S_ISREG(st.st_mode)) {
      auto text = fs::read_small_file(base_fd, name, stageout::k_max_record_bytes);
      auto kept = text ? stageout::kept_from_json(*text) : Result<stageout::KeptResults>(text.error());
      // A record that cannot be read keeps its results: an admin decides (status lists it).
      s.kept_until[*dir] = kept ? kept->until : std::numeric_limits<std::int64_t>::max();
    }
    if (auto job = job_of_marker(name); job && S_ISREG(st.st_mode)) {
      if (auto m = tmpdir::read_keep_marker(base_fd, name)) {
        s.markers[*job] = *m;
      }
    }
  }
  return s;
}

std::set<std::uint32_t> live_step_jobs(const std::string& proc_root)
{
  std::set<std::uint32_t> jobs;
  UniqueFd proc(::open(proc_root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  fs::DirStream d = fs::open_dir_stream(proc.get());
  if (!d) {
    return jobs;
  }
  std::vector<std::string> pids;
  while (struct dirent* e = ::readdir(d.get())) {
    if (e->d_name[0] >= '1' && e->d_name[0] <= '9') {
      pids.emplace_back(e->d_name);
    }
  }
  for (const auto& pid : pids) {
    struct stat st {};
    if (::fstatat(proc.get(), pid.c_str(), &st, 0) != 0 || st.st_uid != 0) {
      continue; // slurmstepd runs as root
    }
    auto comm = fs::read_small_file(proc.get(), pid + "/comm", 64);
    if (!comm || (*comm != "slurmstepd\n" && *comm != "slurmstepd")) {
      continue;
    }
    auto cmd = fs::read_small_file(proc.get(), pid + "/cmdline", 4096);
    if (!cmd) {
      continue;
    }
    // slurmstepd renames itself "slurmstepd: [1234.0]", "[1234.batch]", "[1234.extern]".
    std::string_view c = *cmd;
    constexpr std::string_view k_prefix = "slurmstepd: [";
    if (!c.starts_with(k_prefix)) {
      continue;
    }
    c.remove_prefix(k_prefix.size());
    std::size_t end = c.find_first_of(".]");
    if (auto id = parse_u32(c.substr(0, end))) {
      jobs.insert(*id);
    }
  }
  return jobs;
}

std::set<std::uint32_t> parse_squeue_ids(const std::string& text)
{
  std::set<std::uint32_t> ids;
  for (std::string_view line : split(text, '\n')) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) {
      line.remove_suffix(1);
    }
    while (!line.empty() && line.front() == ' ') {
      line.remove_prefix(1);
    }
    if (auto id = parse_u32(line)) {
      ids.insert(*id);
    }
  }
  return ids;
}

std::optional<std::set<std::uint32_t>> slurmctld_running(const std::string& node, const std::string& squeue,
                                                          std::chrono::milliseconds deadline)
{
  // Every state in which a job may still use its directory on the node.
  auto out = run_program({squeue, "--noheader", "--all", "--nodelist=" + node,
                          "--states=RUNNING,COMPLETING,CONFIGURING,SUSPENDED,STOPPED,SIGNALING,STAGE_OUT,RESIZING",
                          "--format=%A"},
                         deadline);
  if (!out || !out->succeeded()) {
    return std::nullopt;
  }
  return parse_squeue_ids(out->output);
}

namespace {

// The inode readdir gives for `name` (a mount point's own directory, under what is mounted).
std::optional<std::uint64_t> listed_ino(int base_fd, const std::string& name)
{
  fs::DirStream d = fs::open_dir_stream(base_fd);
  if (!d) {
    return std::nullopt;
  }
  while (struct dirent* e = ::readdir(d.get())) {
    if (name == e->d_name) {
      return e->d_ino;
    }
  }
  return std::nullopt;
}

// Detaches what is mounted on `name` or below it; a failure names what stays and why.
std::optional<Failure> detach(int base_fd, const std::string& name, Applied& applied)
{
  auto detached = fs::detach_mounts_below(base_fd, name);
  if (!detached) {
    return Failure{name, name + " is a mount point: left in place (" + detached.error().message + ")"};
  }
  applied.detached.insert(applied.detached.end(), detached->begin(), detached->end());
  return std::nullopt;
}

// Before a directory is collected it is taken from its user (so no new mount appears in it), and
// every mount the user left on it or below it is detached, then the removal walk (which never
// crosses a mount) finds all of it. Returns a failure when something stays mounted.
// `mounted` says whether mountinfo showed a mount below it when the pass began (one read of
// mountinfo per pass, not per entry): one made since is detached at the next pass.
std::optional<Failure> take_and_detach(int base_fd, const std::string& name, bool mounted, Applied& applied)
{
  auto taken = tmpdir::take_from_user(base_fd, name);
  if (!taken && taken.error().code == EXDEV) { // mounted on the directory itself meanwhile
    if (auto f = detach(base_fd, name, applied)) {
      return f;
    }
    taken = tmpdir::take_from_user(base_fd, name);
  }
  if (!taken && taken.error().code != ENOTDIR && taken.error().code != ENOENT) {
    return Failure{name, taken.error().message};
  }
  return mounted ? detach(base_fd, name, applied) : std::nullopt;
}

} // namespace

// The plan itself (below); apply() then collects the views of jobs that are gone.
Applied apply_plan(int base_fd, const Plan& plan, std::chrono::steady_clock::time_point deadline);

namespace {

// A job's cache views (tmpdir/views.hpp) are mounted in its directory: once that directory is gone
// (the epilog or this pass took it, detaching what was mounted there; or the node restarted), the
// views' upper/work directories are removed (fd-relative, never crossing a mount).
void collect_views(int base_fd, Applied& applied)
{
  UniqueFd views(::openat(base_fd, tmpdir::k_views_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat vst {};
  if (!views.valid() || ::fstat(views.get(), &vst) != 0 || vst.st_uid != 0) {
    return;
  }
  std::vector<std::uint32_t> jobs;
  {
    fs::DirStream d = fs::open_dir_stream(views.get());
    if (!d) {
      return;
    }
    while (struct dirent* e = ::readdir(d.get())) {
      if (auto job = tmpdir::job_of_views_name(e->d_name)) {
        jobs.push_back(job);
      }
    }
  }
  for (auto job : jobs) {
    struct stat st {};
    if (::fstatat(base_fd, tmpdir::job_dir_name(job).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 || errno != ENOENT) {
      continue; // the job's directory is there: its views may be in use
    }
    const std::string name = std::string(tmpdir::k_views_dir) + "/" + tmpdir::job_views_name(job);
    if (auto removed = tmpdir::remove_job_views(base_fd, job); !removed) {
      applied.failures.push_back(Failure{name, removed.error().message});
    } else {
      applied.views_removed.push_back(name);
    }
  }
}

// The stage-out directories nothing copies any more: never deleted unrecorded, the results stay,
// under a record, until keep_for like any kept ones.
void record_strays(int base_fd, const Plan& plan, Applied& applied)
{
  for (const auto& stray : plan.strays) {
    stageout::KeptResults k;
    k.job_id = stray.job_id;
    k.uid = stray.uid;
    k.dir = stray.name;
    k.until = stray.until;
    k.reason = "its copy never finished (the epilog or daemon copying it was stopped) and nothing is copying it";
    if (auto saved = stageout::save_kept(base_fd, k); !saved) {
      applied.failures.push_back(Failure{stray.name, saved.error().message});
    } else {
      applied.recorded.push_back(stray.name);
    }
  }
}

// Whether the job directory of `action` (an orphan) has a keep marker naming it now. The listing a
// plan comes from is read before slurmctld is asked: a job whose epilog kept its directory
// meanwhile (its marker written, then the job gone from slurmctld) was listed without its marker
// and judged an orphan.
bool kept_since_listed(int base_fd, const Action& action)
{
  auto marker = tmpdir::read_keep_marker(base_fd, ".keep." + action.name);
  return marker && (marker->ino == 0 || marker->ino == action.ino);
}

// Whether the stale marker of `action` was written again since the listing (it names another
// directory than it did then: its job's epilog kept the directory there now).
bool marker_rewritten(int base_fd, const Action& action)
{
  auto marker = tmpdir::read_keep_marker(base_fd, action.name);
  return marker && marker->ino != action.ino;
}

} // namespace

Applied apply(int base_fd, const Plan& plan, std::chrono::steady_clock::time_point deadline)
{
  Applied applied = apply_plan(base_fd, plan, deadline);
  collect_views(base_fd, applied);
  return applied;
}

Applied apply_plan(int base_fd, const Plan& plan, std::chrono::steady_clock::time_point deadline)
{
  Applied applied;
  for (const auto& name : plan.mount_points) {
    applied.failures.push_back(Failure{name, name + " is a mount point: left in place (unmount it to let GC remove it)"});
  }
  record_strays(base_fd, plan, applied);
  // Unreadable mountinfo: every entry is looked at.
  const auto with_mounts = fs::entries_with_mounts(base_fd);
  auto has_mounts = [&](const std::string& name) { return !with_mounts || with_mounts->count(name) > 0; };
  for (const auto& action : plan.remove) {
    if (std::chrono::steady_clock::now() >= deadline) {
      applied.out_of_time = true;
      break;
    }
    fs::RemoveStats stats;
    std::string target = action.name;
    if (action.mounted == Mounted::yes) {
      // A mount point cannot be renamed (EBUSY), so its name still holds the instance decided on
      // while the mount is there: checked, then detached, before anything else.
      if (action.job_id != 0 && listed_ino(base_fd, action.name) != action.ino) {
        continue;
      }
      if (auto f = detach(base_fd, action.name, applied)) {
        applied.failures.push_back(*f);
        continue;
      }
    }
    if ((action.reason == Reason::orphan && kept_since_listed(base_fd, action)) ||
        (action.reason == Reason::stale_marker && marker_rewritten(base_fd, action))) {
      continue; // its epilog kept it after the listing was read: the next pass judges it with its marker
    }
    if (action.job_id != 0 && action.reason != Reason::stale_marker) {
      // Into the trash first, then make sure it was the instance decided on.
      const std::string aside = aside_name(action.name);
      if (::renameat2(base_fd, action.name.c_str(), base_fd, aside.c_str(), RENAME_NOREPLACE) != 0) {
        if (errno != ENOENT) {
          applied.failures.push_back(Failure{action.name, Error::from_errno("cannot move " + action.name + " aside").message});
        }
        continue;
      }
      struct stat st {};
      if (::fstatat(base_fd, aside.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_ino != action.ino) {
        ::renameat2(base_fd, aside.c_str(), base_fd, action.name.c_str(), RENAME_NOREPLACE);
        continue; // a new instance appeared: it is not what was judged
      }
      target = aside;
      ::unlinkat(base_fd, (".keep." + action.name).c_str(), 0); // decided: its marker goes with it
      ::unlinkat(base_fd, tmpdir::kept_record_name(action.name).c_str(), 0); // and its stage-out record
    }
    if (action.reason != Reason::stale_marker) {
      if (auto f = take_and_detach(base_fd, target, has_mounts(action.name), applied)) {
        applied.failures.push_back(*f); // the rest is removed; the next pass tries again
      }
    }
    auto st = fs::remove_tree_until(base_fd, target, deadline, &stats);
    applied.entries_removed += stats.removed;
    if (st) {
      applied.done.push_back(action);
      continue;
    }
    if (st.error().code == ETIMEDOUT) {
      applied.out_of_time = true; // the rest stays in the trash for the next pass
      break;
    }
    // What could not be removed stays in the trash: the next pass tries again.
    applied.failures.push_back(Failure{target, st.error().message}); // names the path below the base
  }
  return applied;
}

Options options_from(const Config& config)
{
  Options o;
  o.stray_after_seconds = 2 * static_cast<std::int64_t>(config.stage.out_budget.count()) + 1800;
  o.keep_for_seconds = static_cast<std::int64_t>(config.tmpdir.keep_for.count());
  return o;
}

std::optional<std::set<std::string>> pending_stage_outs(const Config& config, std::string_view node)
{
  auto dir = fs::open_trusted_dir(expand_node(config.daemon.state_dir, node), fs::CreateMissing::no);
  if (!dir) {
    return dir.error().code == ENOENT ? std::optional(std::set<std::string>{}) : std::nullopt;
  }
  auto pending = stageout::load_pending(dir->get());
  if (!pending) {
    return std::nullopt; // unknown: every stage-out without a record counts as in progress
  }
  std::set<std::string> names;
  for (const auto& p : *pending) {
    names.insert(p.dir);
  }
  return names;
}

std::vector<Failure> ReportOnce::fresh(const Applied& applied)
{
  std::vector<Failure> out;
  std::set<std::string> now;
  for (const auto& f : applied.failures) {
    now.insert(f.name);
    if (m_said.insert(f.name).second) {
      out.push_back(f);
    }
  }
  if (!applied.out_of_time) {
    std::erase_if(m_said, [&](const std::string& name) { return now.count(name) == 0; });
  }
  return out;
}

} // namespace stagehand::gc
