// Base snapshot, running-job evidence, plan application.
#include "stagehand/gc/collect.hpp"

#include "stagehand/fs/atomic_file.hpp"
#include "stagehand/fs/dir_stream.hpp"
#include "stagehand/fs/remove_tree.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/stageout/kept.hpp"
#include "stagehand/tmpdir/job_dir.hpp"
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
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d.get())) {
    std::string n = e->d_name;
    if (n != "." && n != "..") {
      names.push_back(std::move(n));
    }
  }
  for (const auto& name : names) {
    // No stat by name: a user's FUSE mount on their job directory would be asked, and could hang.
    auto fd = fs::open_beneath(base_fd, name, O_PATH);
    if (!fd) {
      if (fd.error().code == EXDEV) {
        s.mount_points.push_back(name);
      }
      continue; // gone meanwhile
    }
    struct stat st {};
    if (::fstat(fd->get(), &st) != 0) {
      continue;
    }
    // Age by mtime: a prolog's fresh directory is young whatever else happened to it.
    s.entries.push_back(BaseEntry{name, S_ISDIR(st.st_mode), st.st_uid, st.st_mtim.tv_sec, st.st_ino});
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
  if (!out || out->exit_code != 0) {
    return std::nullopt;
  }
  return parse_squeue_ids(out->out);
}

Applied apply(int base_fd, const Plan& plan, std::chrono::steady_clock::time_point deadline)
{
  Applied applied;
  for (const auto& name : plan.mount_points) {
    applied.failures.push_back(Failure{name, name + " is a mount point: left in place (unmount it to let GC remove it)"});
  }
  for (const auto& action : plan.remove) {
    if (std::chrono::steady_clock::now() >= deadline) {
      applied.out_of_time = true;
      break;
    }
    fs::RemoveStats stats;
    std::string target = action.name;
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
