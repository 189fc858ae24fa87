// Hard-link (or clone, or copy) a cache entry into a job directory, as root, fd-relative.
#include "stagehand/cache/materialise.hpp"

#include "stagehand/fs/io.hpp"
#include "stagehand/fs/remove_tree.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/archive/entry_path.hpp"
#include "stagehand/fs/dir_cache.hpp"
#include "stagehand/util/fd.hpp"
#include "stagehand/util/task_pool.hpp"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <vector>

namespace stagehand::cache {

namespace {

struct Made
{
  std::string parent_rel; // below the job directory
  std::string name;
  ino_t ino = 0;          // what was made: rollback removes nothing else
};

// The inode at `name` in `dir`, opened without following or crossing into a mount (a job's FUSE
// mount there is never asked anything); 0 when there is nothing (or nothing of ours).
ino_t ino_at(int dir, const std::string& name)
{
  auto fd = fs::open_beneath(dir, name, O_PATH);
  struct stat st {};
  return fd && ::fstat(fd->get(), &st) == 0 ? st.st_ino : 0;
}

std::string parent_of(const std::string& rel) { return rel.find('/') == std::string::npos ? "" : rel.substr(0, rel.rfind('/')); }
std::string base_of(const std::string& rel) { return rel.substr(rel.rfind('/') + 1); }
std::string join(const std::string& a, const std::string& b) { return a.empty() ? b : a + "/" + b; }

// Opens what root just created at `name` in `parent_fd`, never through a symlink, and checks it is
// still root's and of `type`: the job can rename its own entries over the name at any moment, and
// root must then change the owner or mode of nothing but what it made (never by path).
Result<UniqueFd> open_own(int parent_fd, const std::string& name, mode_t type, const std::string& shown)
{
  const int flags = type == S_IFDIR ? O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC : O_PATH | O_NOFOLLOW | O_CLOEXEC;
  UniqueFd fd(::openat(parent_fd, name.c_str(), flags));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
    return Error::from_errno("cannot open " + shown);
  }
  if ((st.st_mode & S_IFMT) != type || st.st_uid != 0) {
    return Error::refused("$SLURM_TMPDIR/" + shown + " was replaced while it was being made: refused");
  }
  return fd;
}

// Gives what `fd` refers to (a directory, a file, or an O_PATH symlink) to the job user.
Status give_to(int fd, const JobUser& user, const std::string& shown)
{
  if (::fchownat(fd, "", user.uid, user.gid, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) != 0) {
    return Error::from_errno("cannot prepare " + shown);
  }
  return ok_status();
}

// Gives the directory `name` root just made in `parent_fd` to the user, with `mode`.
Status prepare_user_dir(int parent_fd, const std::string& name, mode_t mode, const JobUser& user, const std::string& shown)
{
  auto fd = open_own(parent_fd, name, S_IFDIR, shown);
  if (!fd) {
    return fd.error();
  }
  if (::fchmod(fd->get(), (mode & 0777) | S_IRWXU) != 0) {
    return Error::from_errno("cannot prepare " + shown);
  }
  return give_to(fd->get(), user, shown);
}

// Creates directory `name` in `parent_fd` owned by the user.
Status make_user_dir(int parent_fd, const std::string& name, mode_t mode, const JobUser& user, const std::string& shown)
{
  if (::mkdirat(parent_fd, name.c_str(), 0700) != 0) {
    return Error::from_errno("cannot create " + shown);
  }
  return prepare_user_dir(parent_fd, name, mode, user, shown);
}

// The bytes of `in` into `out`: a reflink when the filesystem can, else a copy.
Status copy_data(int in, int out, const std::string& shown)
{
  if (::ioctl(out, FICLONE, in) == 0) {
    return ok_status();
  }
  for (;;) {
    ssize_t n = ::copy_file_range(in, nullptr, out, nullptr, 1U << 24, 0);
    if (n == 0) {
      return ok_status();
    }
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      break; // not supported here: read and write
    }
  }
  char buf[1 << 16];
  for (;;) {
    auto got = fs::read_some(in, buf, sizeof buf, shown);
    if (!got) {
      return got.error();
    }
    if (*got == 0) {
      return ok_status();
    }
    if (auto st = fs::write_all(out, std::string_view(buf, *got), shown); !st) {
      return st;
    }
  }
}

// Whether a cache file may be hard-linked into a job: the job user reads root's file through its
// "other" bits. The cache keeps the archive's modes (a cache view shows them as the job's own), so
// a file others may not read (0600, 0640) is copied instead, the user's, with that mode.
bool others_read(mode_t mode) { return (mode & S_IROTH) != 0; }

// One file: a hard link, else a reflink or a copy that belongs to the user (made and given by fd).
Status place_file(int src_dir, const std::string& name, int dest_dir, const std::string& dest_name,
                  const JobUser& user, const std::string& shown, std::atomic<std::uint64_t>& linked, bool may_link)
{
  if (may_link && ::linkat(src_dir, name.c_str(), dest_dir, dest_name.c_str(), 0) == 0) {
    ++linked;
    return ok_status();
  }
  if (may_link && errno != EXDEV && errno != EPERM && errno != EMLINK) {
    return Error::from_errno("cannot link " + shown);
  }
  UniqueFd in(::openat(src_dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY));
  struct stat st {};
  if (!in.valid() || ::fstat(in.get(), &st) != 0) {
    return Error::from_errno(shown);
  }
  UniqueFd out_fd(::openat(dest_dir, dest_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!out_fd.valid()) {
    return Error::from_errno("cannot create " + shown);
  }
  if (auto st2 = copy_data(in.get(), out_fd.get(), shown); !st2) {
    return st2;
  }
  if (::fchmod(out_fd.get(), st.st_mode & 0777) != 0) {
    return Error::from_errno("cannot prepare " + shown);
  }
  struct timespec times[2] = {{0, UTIME_OMIT}, st.st_mtim};
  ::futimens(out_fd.get(), times);
  return give_to(out_fd.get(), user, shown);
}

// The files of one directory, placed by a pool thread: linking is most of a materialisation, and
// threads linking into different directories do not wait for each other.
struct FileBatch
{
  fs::SharedFd src_dir;
  fs::SharedFd dest_dir;
  std::string dest_prefix; // "dest/rel/" for messages
  std::vector<std::string> names;
  std::vector<bool> may_link; // per name: others_read()
};

// The symlink `name` in `src_dir` made again in `dest_dir` (its target as read, never followed), the user's.
Status copy_symlink(int src_dir, int dest_dir, const std::string& name, off_t size, const JobUser& user,
                    const std::string& shown)
{
  std::string target(static_cast<std::size_t>(size) + 1, '\0');
  ssize_t n = ::readlinkat(src_dir, name.c_str(), target.data(), target.size());
  if (n < 0) {
    return Error::from_errno(shown);
  }
  target.resize(static_cast<std::size_t>(n));
  if (::symlinkat(target.c_str(), dest_dir, name.c_str()) != 0) {
    return Error::from_errno("cannot create " + shown);
  }
  auto link = open_own(dest_dir, name, S_IFLNK, shown);
  if (!link) {
    return link.error();
  }
  return give_to(link->get(), user, shown);
}

// Refuses `name` in `parent_fd` when it exists, or is something no open may enter (a mount point):
// the job's, refused either way.
Status refuse_existing(int parent_fd, const std::string& name, const std::string& dest_rel)
{
  if (auto there = fs::open_beneath(parent_fd, name, O_PATH); there || there.error().code != ENOENT) {
    return Error::refused("$SLURM_TMPDIR/" + dest_rel + " already exists: refused (staging never replaces "
                          "what the job made)",
                          EEXIST);
  }
  return ok_status();
}

// Where a walk of a cache entry's tree is: the directory of its last entry, open on both sides, and
// that directory's files not yet handed to the pool.
struct TreeWalk
{
  explicit TreeWalk(const std::string& dest) : dest_rel(dest) {}

  const std::string& dest_rel;
  std::string cur_rel = "\x01"; // the directory `cur` holds, relative to dest_rel
  fs::SharedFd cur;
  fs::SharedFd cur_src;
  FileBatch batch;
};

class Materialiser
{
public:
  static constexpr std::size_t k_batch_files = 256;
  static constexpr std::size_t k_max_queued_batches = 16; // each holds two directory descriptors

  Materialiser(int job_fd, const JobUser& user) : m_job(job_fd), m_user(user), m_pool(TaskPool::per_core(), k_max_queued_batches) {}

  Result<Materialised> run(int src_parent, const std::string& src_name, const std::string& dest_rel)
  {
    auto parent = make_parents(parent_of(dest_rel));
    if (!parent) {
      return fail(parent.error());
    }
    const std::string name = base_of(dest_rel);
    struct stat st {};
    if (::fstatat(src_parent, src_name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return fail(Error::from_errno("cache entry data"));
    }
    if (auto absent = refuse_existing(parent->get(), name, dest_rel); !absent) {
      return fail(absent.error());
    }
    if (!S_ISDIR(st.st_mode)) {
      return run_file(src_parent, src_name, parent->get(), name, dest_rel, st);
    }
    return run_tree(src_parent, src_name, parent->get(), name, dest_rel, st.st_mode);
  }

private:
  // A file at `dest_rel` (`name` in `parent_fd`), linked or created exclusively: a name the job takes
  // meanwhile fails here and stays the job's.
  Result<Materialised> run_file(int src_parent, const std::string& src_name, int parent_fd, const std::string& name,
                                const std::string& dest_rel, const struct stat& st)
  {
    if (auto s = place_file(src_parent, src_name, parent_fd, name, m_user, dest_rel, m_linked, others_read(st.st_mode));
        !s) {
      return fail(s.error());
    }
    m_out.linked = m_linked;
    m_made.push_back({parent_of(dest_rel), name, ino_at(parent_fd, name)});
    ++m_out.files;
    m_out.bytes += static_cast<std::uint64_t>(st.st_size);
    m_out.created_top = created_top();
    m_out.created_ino = m_made.front().ino;
    return m_out;
  }

  // A directory at `dest_rel` (`name` in `parent_fd`): made, the user's, then filled from a walk of
  // the cache entry's tree, its files placed by the pool.
  Result<Materialised> run_tree(int src_parent, const std::string& src_name, int parent_fd, const std::string& name,
                                const std::string& dest_rel, mode_t mode)
  {
    if (::mkdirat(parent_fd, name.c_str(), 0700) != 0) {
      return fail(Error::from_errno("cannot create $SLURM_TMPDIR/" + dest_rel));
    }
    m_made.push_back({parent_of(dest_rel), name, ino_at(parent_fd, name)});
    if (auto s = prepare_user_dir(parent_fd, name, mode, m_user, dest_rel); !s) {
      return fail(s.error());
    }
    UniqueFd src_top(::openat(src_parent, src_name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!src_top.valid()) {
      return fail(Error::from_errno("cache entry data"));
    }
    TreeWalk walk(dest_rel);
    auto walked = fs::walk_tree(src_top.get(), [&](const fs::WalkEntry& e) { return visit(walk, e); });
    if (walked) {
      flush(walk.batch);
    }
    const Status placed = m_pool.drain(); // before anything is undone or reported
    m_out.linked = m_linked;
    if (!walked) {
      return fail(walked.error());
    }
    if (!placed) {
      return fail(placed.error());
    }
    m_out.created_top = created_top();
    m_out.created_ino = m_made.front().ino;
    return m_out;
  }

  // One entry of the tree, made in its directory (entered first when it is not the last entry's).
  Result<fs::WalkControl> visit(TreeWalk& w, const fs::WalkEntry& e)
  {
    const std::string rel_parent = parent_of(e.rel);
    if (rel_parent != w.cur_rel) {
      if (auto s = enter_dir(w, e, rel_parent); !s) {
        return s.error();
      }
    }
    const std::string shown = w.dest_rel + "/" + e.rel;
    if (S_ISDIR(e.st.st_mode)) {
      if (auto s = make_user_dir(w.cur->get(), e.name, e.st.st_mode, m_user, shown); !s) {
        return s.error();
      }
    } else if (S_ISREG(e.st.st_mode)) {
      queue_file(w, e, rel_parent);
    } else if (S_ISLNK(e.st.st_mode)) {
      if (auto s = copy_symlink(e.parent_fd, w.cur->get(), e.name, e.st.st_size, m_user, shown); !s) {
        return s.error();
      }
    }
    if (m_pool.failed()) {
      return m_pool.drain().error();
    }
    return fs::WalkControl::go_on;
  }

  // Hands the last directory's files to the pool and opens `rel_parent` (e's directory) on both sides.
  Status enter_dir(TreeWalk& w, const fs::WalkEntry& e, const std::string& rel_parent)
  {
    flush(w.batch);
    auto fd = fs::open_beneath(m_job, join(w.dest_rel, rel_parent), O_RDONLY | O_DIRECTORY);
    if (!fd) {
      return fd.error();
    }
    w.cur = std::make_shared<const UniqueFd>(std::move(*fd));
    w.cur_src = std::make_shared<const UniqueFd>(::fcntl(e.parent_fd, F_DUPFD_CLOEXEC, 0));
    if (!w.cur_src->valid()) {
      return Error::from_errno("cache entry data");
    }
    w.cur_rel = rel_parent;
    ++m_lane; // a directory's batches share a thread: threads link into different directories
    return ok_status();
  }

  // Adds the regular file `e` to its directory's batch, handed to the pool when full.
  void queue_file(TreeWalk& w, const fs::WalkEntry& e, const std::string& rel_parent)
  {
    if (w.batch.names.empty()) {
      w.batch.src_dir = w.cur_src;
      w.batch.dest_dir = w.cur;
      w.batch.dest_prefix = join(w.dest_rel, rel_parent) + "/";
    }
    w.batch.names.push_back(e.name);
    w.batch.may_link.push_back(others_read(e.st.st_mode));
    if (w.batch.names.size() >= k_batch_files) {
      flush(w.batch);
    }
    ++m_out.files;
    m_out.bytes += static_cast<std::uint64_t>(e.st.st_size);
  }

  // The outermost path this call made: the first thing it made.
  std::string created_top() const { return join(m_made.front().parent_rel, m_made.front().name); }

  // Hands `batch` to the pool (which runs it here when it has no threads).
  void flush(FileBatch& batch)
  {
    if (batch.names.empty()) {
      return;
    }
    m_pool.submit(
      [this, b = std::move(batch)] {
        for (std::size_t i = 0; i < b.names.size(); ++i) {
          const std::string& name = b.names[i];
          if (auto s = place_file(b.src_dir->get(), name, b.dest_dir->get(), name, m_user, b.dest_prefix + name, m_linked,
                                  b.may_link[i]);
              !s) {
            return s;
          }
        }
        return ok_status();
      },
      1, m_lane);
    batch = FileBatch{};
  }

  // Opens (creating, owned by the user) each missing directory of `rel` below the job directory.
  Result<UniqueFd> make_parents(const std::string& rel)
  {
    std::string walked;
    auto cur = fs::open_beneath(m_job, "", O_RDONLY | O_DIRECTORY);
    if (!cur) {
      return cur.error();
    }
    std::size_t i = 0;
    while (i < rel.size()) {
      std::size_t j = rel.find('/', i);
      std::string comp = rel.substr(i, j == std::string::npos ? std::string::npos : j - i);
      i = j == std::string::npos ? rel.size() : j + 1;
      std::string next = join(walked, comp);
      if (::mkdirat(cur->get(), comp.c_str(), 0700) == 0) {
        m_made.push_back({walked, comp, ino_at(cur->get(), comp)});
        if (auto given = prepare_user_dir(cur->get(), comp, 0755, m_user, next); !given) {
          return given.error();
        }
      } else if (errno != EEXIST) {
        return Error::from_errno("cannot create $SLURM_TMPDIR/" + next);
      }
      auto fd = fs::open_beneath(m_job, next, O_RDONLY | O_DIRECTORY);
      if (!fd) {
        return fd.error().with_context("$SLURM_TMPDIR/" + next);
      }
      cur = std::move(fd);
      walked = next;
    }
    return cur;
  }

  Error fail(Error e)
  {
    for (auto it = m_made.rbegin(); it != m_made.rend(); ++it) {
      auto parent = fs::open_beneath(m_job, it->parent_rel, O_RDONLY | O_DIRECTORY);
      if (parent && it->ino != 0 && ino_at(parent->get(), it->name) == it->ino) {
        (void)fs::remove_tree(parent->get(), it->name);
      }
    }
    m_made.clear();
    return e;
  }

  int m_job;
  JobUser m_user;
  Materialised m_out;
  std::atomic<std::uint64_t> m_linked{0};
  std::vector<Made> m_made;
  std::size_t m_lane = 0;
  TaskPool m_pool; // last: its threads stop before the members they use go
};

} // namespace

Result<Materialised> materialise(int src_parent_fd, const std::string& src_name, int job_fd,
                                 const std::string& dest_rel, const JobUser& user)
{
  auto parts = archive::split_entry_path(dest_rel);
  if (dest_rel.empty() || dest_rel.front() == '/' || !parts || parts->empty()) {
    return Error::refused("destination \"" + dest_rel + "\" must be relative");
  }
  Materialiser m(job_fd, user);
  return m.run(src_parent_fd, src_name, dest_rel);
}

} // namespace stagehand::cache
