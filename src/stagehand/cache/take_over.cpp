// A fill's seal: everything in it given to root, measured in the same pass, by a few threads.
#include "stagehand/cache/store.hpp"

#include "stagehand/fs/dir_stream.hpp"
#include "stagehand/fs/stat.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/util/thread.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <map>
#include <optional>
#include <system_error>
#include <thread>
#include <vector>

namespace stagehand::cache {

namespace {

// Root's, no write bit for group or others, no set-id bits (directories keep a sticky bit). The
// owner's bits stay as they were (root's: they give no job anything through a hard link; a cache
// view shows them as the job's own, so that a job writes where the archive let its owner write).
mode_t kept_mode(mode_t mode) { return S_ISDIR(mode) ? (01755 & mode) : (0755 & mode); }

// A name of a file with more than one: counted once per inode at the end, where its names are
// checked together, and only then taken over (a file with a name outside the fill is left as
// the filler made it, not given to root).
struct LinkedName
{
  std::pair<dev_t, ino_t> id;
  std::uint64_t bytes = 0;
  nlink_t nlink = 0;
  uid_t owner = 0;
  mode_t mode = 0;
  std::string dir; // the directory holding it, below the top
  std::string name;
  std::string shown;
};
using Linked = std::vector<LinkedName>;

Status take_over_fd(int fd, const struct stat& st, const std::string& shown)
{
  if (::fchown(fd, 0, 0) != 0 || ::fchmod(fd, kept_mode(st.st_mode)) != 0) {
    return Error::from_errno("cannot take over " + shown);
  }
  return ok_status();
}

// What the threads share: directories taken over whose contents are still to do (paths below the
// top), what they occupy, and the first error.
class TakeOver
{
public:
  TakeOver(int top_fd, const fs::FileId& top_id, uid_t filler, const std::string& shown)
    : m_top(top_fd), m_top_id(top_id), m_filler(filler), m_shown(shown)
  {
  }

  void add_dir(std::string rel)
  {
    std::lock_guard lock(m_mutex);
    m_dirs.push_back(std::move(rel));
    m_wake.notify_one();
  }

  // One thread's share: directories until none is left and none is being done.
  void work()
  {
    std::uint64_t used = 0;
    Linked linked;
    std::unique_lock lock(m_mutex);
    for (;;) {
      m_wake.wait(lock, [&] { return !m_dirs.empty() || m_busy == 0 || m_failed; });
      if (m_dirs.empty() || m_failed) {
        break;
      }
      std::string rel = std::move(m_dirs.front());
      m_dirs.pop_front();
      ++m_busy;
      lock.unlock();
      Status st = contents(rel, used, linked);
      lock.lock();
      --m_busy;
      if (!st && !m_failed) {
        m_failed = st.error();
      }
      m_wake.notify_all();
    }
    m_used += used;
    m_linked.insert(m_linked.end(), linked.begin(), linked.end());
  }

  Result<std::uint64_t> result()
  {
    if (m_failed) {
      return *m_failed;
    }
    if (auto st = check_linked(); !st) {
      return st.error();
    }
    if (auto st = take_over_linked(); !st) {
      return st.error();
    }
    return m_used;
  }

private:
  // The files with several names: each the filler's, with no name outside the fill. Each counts
  // once in what the tree occupies.
  Status check_linked()
  {
    std::map<std::pair<dev_t, ino_t>, nlink_t> inside;
    std::map<std::pair<dev_t, ino_t>, nlink_t> anywhere;
    for (const auto& name : m_linked) {
      if (name.owner != m_filler) {
        return not_the_fillers(name.shown, name.owner);
      }
      if (++inside[name.id] == 1) {
        m_used += name.bytes;
      }
      anywhere[name.id] = std::max(anywhere[name.id], name.nlink);
    }
    for (const auto& name : m_linked) {
      if (anywhere[name.id] > inside[name.id]) { // a name outside, which another process may have opened
        return Error::refused("cannot take over " + name.shown + ": it has a name outside the fill", EPERM);
      }
    }
    return ok_status();
  }

  // Every directory is root's now: no name inside changes. (Without Landlock, a process of the
  // filler's that outlived it and holds a directory of the fill could still give one of these a
  // name outside until it is root's: docs/known-limits.md.)
  // Each directory opened once for all its names (a tree of hard links has many).
  Status take_over_linked()
  {
    std::sort(m_linked.begin(), m_linked.end(), [](const LinkedName& a, const LinkedName& b) { return a.dir < b.dir; });
    UniqueFd dir;
    const std::string* open_dir = nullptr;
    for (const auto& name : m_linked) {
      if (!open_dir || *open_dir != name.dir) {
        auto opened = fs::open_beneath(m_top, name.dir, O_RDONLY | O_DIRECTORY);
        if (!opened) {
          return opened.error();
        }
        dir = std::move(*opened);
        open_dir = &name.dir;
      }
      if (auto st = take_over_name(dir.get(), name.name, name.mode, name.shown); !st) {
        return st;
      }
    }
    return ok_status();
  }

  // What the directory `rel` (root's already, so no name in it can be swapped any more) holds:
  // each name changed in place (a symlink never followed), each directory through its own fd, then
  // queued for its contents.
  Status contents(const std::string& rel, std::uint64_t& used, Linked& linked)
  {
    auto dir = fs::open_beneath(m_top, rel, O_RDONLY | O_DIRECTORY); // no symlink, no mount crossed
    if (!dir) {
      return dir.error();
    }
    auto names = fs::list_names(dir->get(), "cannot take over " + shown(rel));
    if (!names) {
      return names.error();
    }
    for (const auto& name : *names) {
      const std::string child = rel.empty() ? name : rel + "/" + name;
      struct stat st {};
      if (::fstatat(dir->get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return Error::from_errno("cannot take over " + shown(child));
      }
      if (st.st_uid != m_filler && (S_ISDIR(st.st_mode) || st.st_nlink == 1)) { // (more names: result())
        return not_the_fillers(shown(child), st.st_uid);
      }
      const std::uint64_t bytes = static_cast<std::uint64_t>(st.st_blocks) * 512;
      if (S_ISDIR(st.st_mode)) {
        used += bytes;
        if (auto done = directory(dir->get(), name, st, child); !done) {
          return done;
        }
        add_dir(child);
        continue;
      }
      if (st.st_nlink > 1) { // judged, and taken over, with its other names (result())
        linked.push_back({{st.st_dev, st.st_ino}, bytes, st.st_nlink, st.st_uid, st.st_mode, rel, name, shown(child)});
        continue;
      }
      used += bytes;
      if (auto done = take_over_name(dir->get(), name, st.st_mode, shown(child)); !done) {
        return done;
      }
    }
    return ok_status();
  }

  // Root's, by name in a directory of root's (a symlink never followed).
  static Status take_over_name(int dir_fd, const std::string& name, mode_t mode, const std::string& shown)
  {
    const mode_t keep = kept_mode(mode);
    if (::fchownat(dir_fd, name.c_str(), 0, 0, AT_SYMLINK_NOFOLLOW) != 0 ||
        (S_ISREG(mode) && (mode & 07777) != keep && ::fchmodat(dir_fd, name.c_str(), keep, 0) != 0)) {
      return Error::from_errno("cannot take over " + shown);
    }
    return ok_status();
  }

  Status directory(int parent_fd, const std::string& name, const struct stat& listed, const std::string& rel)
  {
    UniqueFd fd(::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat st {};
    if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
      return Error::from_errno("cannot take over " + shown(rel));
    }
    if (st.st_dev != listed.st_dev || st.st_ino != listed.st_ino) {
      return Error::io("cannot take over " + shown(rel) + ": it was replaced meanwhile", EAGAIN);
    }
    auto id = fs::file_id(fd.get(), shown(rel));
    if (!id || !fs::same_mount(*id, m_top_id)) { // never the root of something mounted there
      return id ? Error::refused("cannot take over " + shown(rel) + ": another filesystem is mounted there", EXDEV)
                : id.error();
    }
    return take_over_fd(fd.get(), st, shown(rel));
  }

  std::string shown(const std::string& rel) const { return rel.empty() ? m_shown : m_shown + "/" + rel; }

  // Something the fill did not make: linked (or moved) in from outside by a compromised filler,
  // and perhaps held open for writing by its owner, which a change of owner would not stop.
  static Error not_the_fillers(const std::string& shown, uid_t owner)
  {
    return Error::refused("cannot take over " + shown + ": owned by uid " + std::to_string(owner) +
                            ", not by the fill's user",
                          EPERM);
  }

  int m_top;
  fs::FileId m_top_id;
  uid_t m_filler; // who made the fill: its top's owner before the take-over
  const std::string& m_shown;
  std::mutex m_mutex;
  std::condition_variable m_wake;
  std::deque<std::string> m_dirs;
  int m_busy = 0;
  std::optional<Error> m_failed;
  std::uint64_t m_used = 0;
  Linked m_linked;
};

} // namespace

Result<std::uint64_t> take_over(int dir_fd, const std::string& shown)
{
  struct stat top {};
  auto top_id = fs::file_id(dir_fd, shown);
  if (!top_id || ::fstat(dir_fd, &top) != 0) {
    return top_id ? Error::from_errno(shown) : top_id.error();
  }
  // The top first, then each directory before what it holds: once a directory is root's, the user
  // who filled it can no longer swap the names in it for others.
  if (auto st = take_over_fd(dir_fd, top, shown); !st) {
    return st.error();
  }
  TakeOver t(dir_fd, *top_id, top.st_uid, shown);
  t.add_dir("");
  const unsigned threads = std::clamp(std::thread::hardware_concurrency(), 1U, 8U);
  std::vector<Thread> helpers; // (the library's threads: util/thread.hpp)
  helpers.reserve(threads);
  for (unsigned i = 1; i < threads; ++i) {
    try {
      helpers.emplace_back([&] { t.work(); });
    } catch (const std::system_error&) {
      break; // no thread to be had (EAGAIN): the ones there are do it all
    } catch (...) { // (out of memory) the ones started end with the work, before this leaves
      t.work();
      for (auto& h : helpers) {
        h.join();
      }
      throw;
    }
  }
  t.work();
  for (auto& h : helpers) {
    h.join();
  }
  auto used = t.result();
  if (!used) {
    return used.error();
  }
  return *used + static_cast<std::uint64_t>(top.st_blocks) * 512;
}

} // namespace stagehand::cache
