// --stage-out copies: fd-relative below DEST, temporary name then rename for every file.
#include "stagehand/stageout/copy.hpp"

#include "stagehand/fs/tree_copy.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/fs/io.hpp"
#include "stagehand/stage/copy.hpp"
#include "stagehand/util/fd.hpp"

#include <fcntl.h>
#include <fnmatch.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <limits>
#include <vector>

namespace stagehand::stageout {

namespace {

using Clock = std::chrono::steady_clock;

struct Copier
{
  Clock::time_point until;
  EntryResult& r;

  Status check_time() const
  {
    if (Clock::now() >= until) {
      return Error::limit("stopped at the epilog's time budget");
    }
    return ok_status();
  }

  // One temporary name per target, removed first: a copy that resumes after a crash replaces what
  // the interrupted one left instead of leaving it beside.
  static std::string temp_name(int parent, const std::string& name)
  {
    std::string tmp = ".stagehand-out." + name.substr(0, 200);
    ::unlinkat(parent, tmp.c_str(), 0);
    return tmp;
  }

  // The regular file open at `in` to `name` in `parent`: written under a temporary name, renamed over.
  Status put_file(int in, int parent, const std::string& name, const std::string& rel)
  {
    struct stat st {};
    if (::fstat(in, &st) != 0) {
      return Error::from_errno(rel);
    }
    const std::string tmp = temp_name(parent, name);
    UniqueFd out(::openat(parent, tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!out.valid()) {
      return Error::from_errno("cannot create a file for " + rel);
    }
    stage::CopyStats stats;
    auto copied = stage::copy_into(in, out.get(), std::numeric_limits<std::uint64_t>::max(), stats, rel);
    if (copied && ::fsync(out.get()) != 0) {
      copied = Error::from_errno("cannot write " + rel);
    }
    if (copied && ::renameat(parent, tmp.c_str(), parent, name.c_str()) != 0) {
      copied = Error::from_errno("cannot put " + rel + " in place");
    }
    if (!copied) {
      ::unlinkat(parent, tmp.c_str(), 0);
      return copied;
    }
    r.files += stats.files;
    r.bytes += stats.bytes;
    return ok_status();
  }

  Status put_symlink(int src_parent, const std::string& src_name, off_t size, int parent, const std::string& name,
                     const std::string& rel)
  {
    std::string target(static_cast<std::size_t>(size > 0 ? size : 4096) + 1, '\0');
    ssize_t n = ::readlinkat(src_parent, src_name.c_str(), target.data(), target.size());
    if (n < 0) {
      return Error::from_errno(rel);
    }
    target.resize(static_cast<std::size_t>(n));
    const std::string tmp = temp_name(parent, name);
    if (::symlinkat(target.c_str(), parent, tmp.c_str()) != 0) {
      return Error::from_errno("cannot create " + rel);
    }
    if (::renameat(parent, tmp.c_str(), parent, name.c_str()) != 0) {
      Error e = Error::from_errno("cannot put " + rel + " in place");
      ::unlinkat(parent, tmp.c_str(), 0);
      return e;
    }
    ++r.symlinks;
    return ok_status();
  }

  // A directory at `name` in `parent`: made, or an existing real directory kept.
  Status put_dir(int parent, const std::string& name, const std::string& rel)
  {
    if (::mkdirat(parent, name.c_str(), 0700) == 0) {
      return ok_status();
    }
    if (errno != EEXIST) {
      return Error::from_errno("cannot create " + rel);
    }
    struct stat st {};
    if (::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode)) {
      return Error::refused(rel + " exists in DEST and is not a directory");
    }
    return ok_status();
  }

  // One entry of the scratch directory (lstat'ed) to `name` in `dest_parent`.
  Status put(int src_parent, const std::string& src_name, int dest_parent, const std::string& name, const std::string& rel)
  {
    if (auto t = check_time(); !t) {
      return t;
    }
    struct stat st {};
    if (::fstatat(src_parent, src_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return Error::from_errno(rel);
    }
    if (S_ISLNK(st.st_mode)) {
      return put_symlink(src_parent, src_name, st.st_size, dest_parent, name, rel);
    }
    if (S_ISREG(st.st_mode)) {
      UniqueFd in(::openat(src_parent, src_name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
      struct stat fst {};
      if (!in.valid() || ::fstat(in.get(), &fst) != 0) {
        return Error::from_errno(rel);
      }
      if (!S_ISREG(fst.st_mode)) {
        ++r.skipped;
        return ok_status();
      }
      ::fcntl(in.get(), F_SETFL, ::fcntl(in.get(), F_GETFL) & ~O_NONBLOCK);
      return put_file(in.get(), dest_parent, name, rel);
    }
    if (S_ISDIR(st.st_mode)) {
      auto src = fs::open_beneath(src_parent, src_name, O_RDONLY | O_DIRECTORY);
      if (!src) {
        return src.error().with_context(rel);
      }
      if (auto d = put_dir(dest_parent, name, rel); !d) {
        return d;
      }
      auto dest = fs::open_beneath(dest_parent, name, O_RDONLY | O_DIRECTORY);
      if (!dest) {
        return dest.error().with_context(rel);
      }
      return put_tree(src->get(), dest->get(), rel);
    }
    ++r.skipped;
    return ok_status();
  }

  // The contents of the directory `src_fd` into the directory `dest_fd`.
  Status put_tree(int src_fd, int dest_fd, const std::string& shown)
  {
    return fs::copy_walk(
      src_fd, dest_fd, shown,
      [&](const fs::WalkEntry& e, int dest_parent) -> Result<fs::Placed> {
        if (auto t = check_time(); !t) {
          return t.error();
        }
        const std::string rel = shown + "/" + e.rel;
        Status st = ok_status();
        fs::Placed placed = fs::Placed::other;
        if (S_ISDIR(e.st.st_mode)) {
          st = put_dir(dest_parent, e.name, rel);
          placed = fs::Placed::directory;
        } else if (S_ISREG(e.st.st_mode) || S_ISLNK(e.st.st_mode)) {
          st = put(e.parent_fd, e.name, dest_parent, e.name, rel);
        } else {
          ++r.skipped;
        }
        if (!st) {
          return st.error();
        }
        return placed;
      },
      [](int fd, const struct stat& st) { ::fchmod(fd, (st.st_mode & 0777) | S_IRWXU); });
  }
};

// mkdir -p as the user (ordinary path resolution: DEST's own path is the user's to choose), then
// the directory, opened.
Result<UniqueFd> make_dirs(const std::string& path)
{
  std::string prefix;
  for (std::size_t i = 1; i <= path.size(); ++i) {
    if (i == path.size() || path[i] == '/') {
      prefix = path.substr(0, i);
      if (::mkdir(prefix.c_str(), 0777) != 0 && errno != EEXIST) {
        return Error::from_errno("cannot create " + prefix);
      }
    }
  }
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) {
    return Error::from_errno("cannot open " + path);
  }
  return fd;
}

std::string parent_of(const std::string& path)
{
  const auto slash = path.rfind('/');
  return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

std::string base_of(const std::string& path) { return path.substr(path.rfind('/') + 1); }

Status copy(int tmpdir_fd, const OutSpec& spec, const std::string& dest, Copier& c)
{
  const auto slash = spec.src.rfind('/');
  const std::string dir_rel = slash == std::string::npos ? "" : spec.src.substr(0, slash);
  const std::string name = slash == std::string::npos ? spec.src : spec.src.substr(slash + 1);
  auto src_dir = fs::open_beneath(tmpdir_fd, dir_rel, O_RDONLY | O_DIRECTORY);
  if (!src_dir) {
    return src_dir.error().with_context("$SLURM_TMPDIR/" + (dir_rel.empty() ? "." : dir_rel));
  }
  if (is_glob(spec.src)) {
    std::vector<std::string> matches;
    auto walked = fs::walk_tree(src_dir->get(), [&](const fs::WalkEntry& e) -> Result<fs::WalkControl> {
      if (::fnmatch(name.c_str(), e.name.c_str(), FNM_PERIOD) == 0 && !(dir_rel.empty() && e.name == ".stagehand")) {
        matches.push_back(e.name);
      }
      return S_ISDIR(e.st.st_mode) ? fs::WalkControl::skip_dir : fs::WalkControl::go_on;
    });
    if (!walked) {
      return walked.error().with_context("$SLURM_TMPDIR/" + spec.src);
    }
    if (matches.empty()) {
      return Error::refused("nothing in $SLURM_TMPDIR matches " + spec.src);
    }
    auto out = make_dirs(dest);
    if (!out) {
      return out.error();
    }
    c.r.log_dir = dest;
    for (const auto& m : matches) {
      const std::string rel = dir_rel.empty() ? m : dir_rel + "/" + m;
      if (auto st = c.put(src_dir->get(), m, out->get(), m, rel); !st) {
        return st;
      }
    }
    return ok_status();
  }
  struct stat st {};
  if (::fstatat(src_dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return Error::from_errno("$SLURM_TMPDIR/" + spec.src);
  }
  if (S_ISDIR(st.st_mode)) {
    auto out = make_dirs(dest);
    if (!out) {
      return out.error();
    }
    c.r.log_dir = dest;
    auto src = fs::open_beneath(src_dir->get(), name, O_RDONLY | O_DIRECTORY);
    if (!src) {
      return src.error().with_context("$SLURM_TMPDIR/" + spec.src);
    }
    return c.put_tree(src->get(), out->get(), spec.src);
  }
  auto out = make_dirs(parent_of(dest));
  if (!out) {
    return out.error();
  }
  c.r.log_dir = parent_of(dest);
  return c.put(src_dir->get(), name, out->get(), base_of(dest), spec.src);
}

std::string fixed(double v, int digits)
{
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

Result<UniqueFd> open_log(const std::string& dir)
{
  UniqueFd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!d.valid()) {
    return Error::from_errno(dir);
  }
  // Non-blocking: a FIFO planted at the name must not hold the copy (or the epilog) forever.
  UniqueFd f(::openat(d.get(), k_log_name, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644));
  if (!f.valid()) {
    return Error::from_errno(dir + "/" + k_log_name);
  }
  struct stat st {};
  if (::fstat(f.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return Error::refused(dir + "/" + k_log_name + " is not a regular file");
  }
  return f;
}

} // namespace

Status mark_first_node(int tmpdir_fd)
{
  if (::mkdirat(tmpdir_fd, ".stagehand", 0700) != 0 && errno != EEXIST) {
    return Error::from_errno("cannot create $SLURM_TMPDIR/.stagehand");
  }
  auto dir = fs::open_beneath(tmpdir_fd, ".stagehand", O_RDONLY | O_DIRECTORY);
  if (!dir) {
    return dir.error();
  }
  UniqueFd f(::openat(dir->get(), k_first_node_marker, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!f.valid()) {
    return Error::from_errno(std::string("cannot create $SLURM_TMPDIR/.stagehand/") + k_first_node_marker);
  }
  return ok_status();
}

bool is_first_node(int tmpdir_fd)
{
  const std::string rel = std::string(".stagehand/") + k_first_node_marker;
  struct stat st {};
  return ::fstatat(tmpdir_fd, rel.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

EntryResult copy_entry(int tmpdir_fd, const OutSpec& spec, const std::string& dest, Clock::time_point until)
{
  EntryResult r;
  r.src = spec.src;
  r.dest = dest;
  const auto t0 = Clock::now();
  Copier c{until, r};
  if (auto st = copy(tmpdir_fd, spec, dest, c); !st) {
    r.error = st.error().message;
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

std::string summary(const EntryResult& r)
{
  std::string counts = std::to_string(r.files) + (r.files == 1 ? " file, " : " files, ") + std::to_string(r.bytes) +
                       " bytes";
  if (r.symlinks) {
    counts += ", " + std::to_string(r.symlinks) + (r.symlinks == 1 ? " symlink" : " symlinks");
  }
  if (r.skipped) {
    counts += ", " + std::to_string(r.skipped) + " special files skipped";
  }
  const std::string head = r.src + " -> " + r.dest + ": ";
  if (!r.error.empty()) {
    if (r.files || r.symlinks) {
      return head + "incomplete (" + counts + " copied): " + r.error;
    }
    return head + "not copied: " + r.error;
  }
  return head + counts + ", " + fixed(r.seconds, 2) + " s";
}

std::string append_log(const EntryResult& r, const std::string& fallback_dir, std::uint32_t job_id,
                       const std::string& node)
{
  return append_log_line({r.log_dir, fallback_dir}, job_id, node, summary(r));
}

std::vector<std::string> log_dirs_of(const std::string& dest)
{
  struct stat st {};
  if (::stat(dest.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    return {dest, parent_of(dest)};
  }
  return {parent_of(dest)};
}

std::string append_log_line(const std::vector<std::string>& dirs, std::uint32_t job_id, const std::string& node,
                            const std::string& text)
{
  char when[32];
  std::time_t now = std::time(nullptr);
  struct tm tm {};
  ::gmtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
  const std::string line = std::string(when) + " job " + std::to_string(job_id) + " node " + node + ": " + text + "\n";
  for (const auto& dir : dirs) {
    if (dir.empty()) {
      continue;
    }
    auto f = open_log(dir);
    if (f && fs::write_all(f->get(), line, k_log_name)) {
      return dir + "/" + k_log_name;
    }
  }
  return "";
}

} // namespace stagehand::stageout
