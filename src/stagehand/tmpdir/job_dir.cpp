// Job directory lifecycle as root, fd-relative throughout.
#include "stagehand/tmpdir/job_dir.hpp"

#include "stagehand/fs/dir_stream.hpp"
#include "stagehand/fs/remove_tree.hpp"
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

std::string keep_marker_name(std::uint32_t job_id) { return std::string(k_keep_prefix) + job_dir_name(job_id); }

// Moves `name` aside under a fresh trash name, then removes it; errors are returned but the
// name is free afterwards whenever the rename worked.
Status move_aside_and_remove(int base_fd, const std::string& name)
{
  std::string trash = std::string(k_trash_prefix) + name + "." + unique_suffix();
  if (::renameat2(base_fd, name.c_str(), base_fd, trash.c_str(), RENAME_NOREPLACE) != 0) {
    if (errno == ENOENT) {
      return ok_status();
    }
    return Error::from_errno("cannot move stale " + name + " aside");
  }
  return fs::remove_tree(base_fd, trash);
}

std::optional<std::time_t> read_marker(int base_fd, const std::string& name)
{
  UniqueFd fd(::openat(base_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY));
  if (!fd.valid()) {
    return std::nullopt;
  }
  char buf[64] = {};
  ssize_t n = ::read(fd.get(), buf, sizeof buf - 1);
  if (n <= 0) {
    return std::nullopt;
  }
  long long until = 0;
  auto [p, ec] = std::from_chars(buf, buf + n, until);
  if (ec != std::errc()) {
    return std::nullopt;
  }
  return static_cast<std::time_t>(until);
}

} // namespace

std::string job_dir_name(std::uint32_t job_id) { return "job_" + std::to_string(job_id); }

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
      return Error{EPERM, staging + " was replaced while being created"};
    }
    if (::fchown(fd.get(), owner.uid, owner.gid) != 0 || ::fchmod(fd.get(), 0700) != 0) {
      Error e = Error::from_errno("cannot set owner/mode of " + name);
      discard();
      return e;
    }
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
    auto aside = move_aside_and_remove(base_fd, name);
    outcome = CreateOutcome::replaced_stale;
    (void)aside; // the name is free even if removing the stale tree hit an error; gc retries it
  }
  discard();
  return Error{EEXIST, name + " keeps reappearing"};
}

Status remove_job_dir(int base_fd, std::uint32_t job_id)
{
  auto st = fs::remove_tree(base_fd, job_dir_name(job_id));
  if (::unlinkat(base_fd, keep_marker_name(job_id).c_str(), 0) != 0 && errno != ENOENT && st) {
    return Error::from_errno("cannot remove " + keep_marker_name(job_id));
  }
  return st;
}

Status mark_kept(int base_fd, std::uint32_t job_id, std::time_t until)
{
  const std::string name = keep_marker_name(job_id);
  const std::string tmp = name + "." + unique_suffix();
  UniqueFd fd(::openat(base_fd, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd.valid()) {
    return Error::from_errno("cannot create " + tmp);
  }
  std::string text = std::to_string(static_cast<long long>(until)) + "\n";
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size()) || ::fsync(fd.get()) != 0) {
    Error e = Error::from_errno("cannot write " + tmp);
    ::unlinkat(base_fd, tmp.c_str(), 0);
    return e;
  }
  if (::renameat(base_fd, tmp.c_str(), base_fd, name.c_str()) != 0) {
    Error e = Error::from_errno("cannot rename " + tmp);
    ::unlinkat(base_fd, tmp.c_str(), 0);
    return e;
  }
  return ok_status();
}

GcResult remove_expired(int base_fd, std::time_t now, DryRun dry_run)
{
  GcResult result;
  fs::DirStream d = fs::open_dir_stream(base_fd);
  if (!d) {
    result.errors.push_back(Error::from_errno("cannot read the base directory"));
    return result;
  }
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d.get())) {
    names.emplace_back(e->d_name);
  }
  for (const auto& name : names) {
    std::string_view n = name;
    if (n.starts_with(k_trash_prefix)) {
      result.removed.push_back(name);
      if (dry_run == DryRun::no) {
        if (auto st = fs::remove_tree(base_fd, name); !st) {
          result.errors.push_back(st.error());
        }
      }
      continue;
    }
    if (!n.starts_with(k_keep_prefix) || !n.substr(k_keep_prefix.size()).starts_with("job_")) {
      continue;
    }
    auto id = parse_u32(n.substr(k_keep_prefix.size() + 4));
    if (!id) {
      continue; // a marker's temporary file, or not ours
    }
    auto until = read_marker(base_fd, name);
    if (until && *until > now) {
      continue;
    }
    result.removed.push_back(job_dir_name(*id));
    if (dry_run == DryRun::no) {
      if (auto st = remove_job_dir(base_fd, *id); !st) {
        result.errors.push_back(st.error());
      }
    }
  }
  return result;
}

Result<std::string> find_job_dir(const std::string& base_path, std::uint32_t job_id, uid_t uid)
{
  std::string path = base_path + "/" + job_dir_name(job_id);
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    return Error::from_errno(path);
  }
  if (!S_ISDIR(st.st_mode)) {
    return Error{ENOTDIR, path + ": not a directory"};
  }
  if (st.st_uid != uid) {
    return Error{EPERM, path + ": owned by uid " + std::to_string(st.st_uid) + ", not the job user"};
  }
  return path;
}

Status check_node_name(const std::string& node)
{
  if (node.empty() || node == "." || node == ".." || node.find('/') != std::string::npos) {
    return Error::invalid("unusable node name \"" + node + "\"");
  }
  return ok_status();
}

} // namespace stagehand::tmpdir
