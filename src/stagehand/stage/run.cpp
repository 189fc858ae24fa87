// The staging run: destinations, copies and unpacking, summary lines, cleanup on failure.
#include "stagehand/stage/run.hpp"

#include "stagehand/fs/remove_tree.hpp"
#include "stagehand/stage/copy.hpp"
#include "stagehand/archive/extract.hpp"
#include "stagehand/stage/source.hpp"
#include "stagehand/util/fd.hpp"
#include "stagehand/util/units.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <optional>

namespace stagehand::stage {

namespace {

// What this run created: (parent fd, name, inode), in creation order. Only these are removed on
// failure, and only while the name still holds that very inode: never what the job made.
struct MadeEntry
{
  UniqueFd parent;
  std::string name;
  ino_t ino = 0;
  CreatedName created; // the same name below the job's directory, as a delivery reports it
};
using Made = std::vector<MadeEntry>;

// `rel`: the same name below the job's directory.
void remember(Made& made, int parent, const std::string& name, const std::string& rel, int made_fd)
{
  struct stat st {};
  if (::fstat(made_fd, &st) != 0) {
    return;
  }
  try {
    made.push_back(MadeEntry{UniqueFd(::fcntl(parent, F_DUPFD_CLOEXEC, 0)), name, st.st_ino,
                             CreatedName{rel, st.st_dev, st.st_ino}});
  } catch (...) { // out of memory: what cannot be recorded goes at once
    try {
      (void)fs::remove_tree(parent, name);
    } catch (...) {
    }
    throw;
  }
}

void undo(Made& made)
{
  for (auto it = made.rbegin(); it != made.rend(); ++it) {
    struct stat st {};
    if (::fstatat(it->parent.get(), it->name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && st.st_ino == it->ino) {
      (void)fs::remove_tree(it->parent.get(), it->name);
    }
  }
  made.clear();
}

Error exists_already(const std::string& dest)
{
  return Error::refused("$SLURM_TMPDIR/" + dest + " already exists: refused (staging never replaces what the job made)",
                        EEXIST);
}

// Opens (creating 0755 as needed) the parent directories of `dest` below `root_fd`, O_NOFOLLOW;
// the directories it creates are appended to `made`.
Result<UniqueFd> open_parent(int root_fd, const std::string& dest, std::string& last, Made& made)
{
  UniqueFd cur(::fcntl(root_fd, F_DUPFD_CLOEXEC, 0));
  std::size_t i = 0;
  for (;;) {
    std::size_t j = dest.find('/', i);
    if (j == std::string::npos) {
      last = dest.substr(i);
      return cur;
    }
    std::string comp = dest.substr(i, j - i);
    const bool created = ::mkdirat(cur.get(), comp.c_str(), 0755) == 0;
    if (!created && errno != EEXIST) {
      return Error::from_errno("cannot create " + dest.substr(0, j));
    }
    UniqueFd next(::openat(cur.get(), comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) {
      return Error::from_errno(dest.substr(0, j));
    }
    if (created) {
      remember(made, cur.get(), comp, dest.substr(0, j), next.get());
    }
    cur = std::move(next);
    i = j + 1;
  }
}

// DEST as a new directory below `parent` (0700 while it fills, 0755 after), remembered in `made`.
Result<UniqueFd> make_dest_dir(int parent, const std::string& name, const std::string& dest, Made& made)
{
  if (::mkdirat(parent, name.c_str(), 0700) != 0) {
    return errno == EEXIST ? exists_already(dest) : Error::from_errno("cannot create $SLURM_TMPDIR/" + dest);
  }
  UniqueFd fd(::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    return Error::from_errno("$SLURM_TMPDIR/" + dest);
  }
  remember(made, parent, name, dest, fd.get());
  return fd;
}

Result<Delivered> deliver_into(int in_fd, StreamContent content, const struct stat& file_stat, const DeliverTo& to,
                               const std::string& shown, Made& made)
{
  const int tmpdir_fd = to.tmpdir_fd;
  const std::string& dest = to.dest;
  const std::uint64_t room = to.room;
  archive::WorkCounters* const counters = to.counters;
  std::string name;
  auto parent = open_parent(tmpdir_fd, dest, name, made);
  if (!parent) {
    return parent.error();
  }
  Delivered out;
  if (content == StreamContent::plain_file) {
    UniqueFd file(::openat(parent->get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!file.valid()) {
      return errno == EEXIST ? exists_already(dest) : Error::from_errno("cannot create $SLURM_TMPDIR/" + dest);
    }
    remember(made, parent->get(), name, dest, file.get());
    CopyStats stats;
    stats.counters = counters;
    if (auto st = copy_into(in_fd, file.get(), room, stats, shown); !st) {
      return st.error();
    }
    // What a copy of the file itself gets (copy_into took the stream's).
    const struct timespec times[2] = {file_stat.st_atim, file_stat.st_mtim};
    if (::fchmod(file.get(), file_stat.st_mode & 0777) != 0 || ::futimens(file.get(), times) != 0) {
      return Error::from_errno("cannot set the mode of $SLURM_TMPDIR/" + dest);
    }
    out.files = 1;
    out.bytes = stats.bytes;
    return out;
  }
  auto dir = make_dest_dir(parent->get(), name, dest, made);
  if (!dir) {
    return dir.error();
  }
  archive::ExtractLimits el;
  el.max_bytes = room;
  el.counters = counters;
  auto stats = archive::extract_archive(in_fd, dir->get(), el, shown);
  if (!stats) {
    return stats.error();
  }
  out.files = stats->files + stats->hardlinks;
  out.bytes = stats->bytes;
  out.how = content == StreamContent::archive ? Placement::unpacked : Placement::copied;
  ::fchmod(dir->get(), 0755);
  return out;
}

using Staged = Placed;

// One source into place; errors are the reason alone (the caller names the source).
Result<Staged> stage_one(const CheckedSource& src, int tmpdir_fd, const StageLimits& limits, std::uint64_t room,
                         Made& made)
{
  std::string name;
  auto parent = open_parent(tmpdir_fd, src.dest, name, made);
  if (!parent) {
    return parent.error();
  }
  // The one way every path opens a source: no FIFO can hang us, allowed_roots holds for what is
  // really open.
  auto in = open_source(src.path, src.kind, limits.allowed_roots);
  if (!in) {
    return in.error().code == ENOENT ? Error::refused("vanished since submission", ENOENT) : in.error();
  }
  struct stat in_st {};
  const std::uint64_t in_size =
    src.kind == SourceKind::file && ::fstat(in->fd.get(), &in_st) == 0 && S_ISREG(in_st.st_mode) ? static_cast<std::uint64_t>(in_st.st_size) : 0;
  // A file's progress is its offset; a directory's, the bytes its copy has written so far, of the
  // total its check on this node measured.
  archive::WorkCounters tree_done;
  const std::optional<ProgressScope> progress =
    src.kind == SourceKind::dir ? std::optional<ProgressScope>(std::in_place, limits.progress, src.shown,
                                              [&tree_done] { return tree_done.bytes.load(std::memory_order_relaxed); },
                                              src.bytes)
               : std::optional<ProgressScope>(std::in_place, limits.progress, src.shown, in->fd.get(), in_size);
  Staged out;
  // The content decides, here too: a file is unpacked only if it really is an archive.
  bool unpack = false;
  if (src.kind == SourceKind::file && src.unpack) {
    auto kind = archive::probe_archive(in->fd.get());
    unpack = kind && *kind == archive::ArchiveKind::archive;
  }
  if (src.kind == SourceKind::file && !unpack) {
    UniqueFd file(::openat(parent->get(), name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!file.valid()) {
      return errno == EEXIST ? exists_already(src.dest) : Error::from_errno("cannot create $SLURM_TMPDIR/" + src.dest);
    }
    remember(made, parent->get(), name, src.dest, file.get());
    CopyStats stats;
    if (auto st = copy_into(in->fd.get(), file.get(), room, stats, src.shown); !st) {
      return st.error();
    }
    out.files = 1;
    out.bytes = stats.bytes;
    return out;
  }
  auto made_dir = make_dest_dir(parent->get(), name, src.dest, made);
  if (!made_dir) {
    return made_dir.error();
  }
  UniqueFd dest = std::move(*made_dir);
  if (src.kind == SourceKind::dir) {
    CopyStats stats;
    stats.counters = &tree_done;
    if (auto st = copy_tree(in->fd.get(), dest.get(), room, stats, src.shown); !st) {
      return st.error();
    }
    out.files = stats.files;
    out.bytes = stats.bytes;
  } else {
    archive::ExtractLimits el;
    el.max_bytes = room;
    el.writer_threads = limits.writer_threads;
    auto stats = archive::extract_archive(in->fd.get(), dest.get(), el, src.shown);
    if (!stats) {
      return stats.error();
    }
    out.files = stats->files + stats->hardlinks;
    out.bytes = stats->bytes;
    out.how = Placement::unpacked;
  }
  ::fchmod(dest.get(), 0755);
  return out;
}

Result<std::vector<std::string>> stage_sources(const std::vector<CheckedSource>& sources, int tmpdir_fd,
                                               const std::string& tmpdir_path, const StageLimits& limits, Made& made,
                                               const CheckedSource*& current)
{
  std::vector<std::string> lines;
  std::uint64_t total = 0;
  for (const auto& src : sources) {
    current = &src;
    const auto t0 = std::chrono::steady_clock::now();
    const std::uint64_t room = limits.max_bytes > total ? limits.max_bytes - total : 0;
    auto staged = stage_one(src, tmpdir_fd, limits, room, made);
    if (!staged) {
      return staged.error();
    }
    total += staged->bytes;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    lines.push_back(summary_line(staged->how, src.shown, tmpdir_path, src.dest, staged->files, staged->bytes, secs,
                                 "no cache"));
  }
  return lines;
}

} // namespace

namespace {

// `make(made)`, and on an error (out of memory included) what it recorded in `made` removed.
Result<Delivered> undone_on_error(const std::function<Result<Delivered>(Made&)>& make)
{
  Made made;
  auto undo_on_error = [&](const Error& e) {
    try {
      undo(made);
    } catch (...) {
    }
    return e;
  };
  try {
    auto r = make(made);
    if (!r) {
      return undo_on_error(r.error());
    }
    if (!made.empty()) {
      r->created = made.front().created; // the outermost: made first
    }
    return r;
  } catch (const std::bad_alloc&) {
    return undo_on_error(Error{ErrorKind::limit, ENOMEM, "out of memory on this node"});
  } catch (const std::exception& e) {
    return undo_on_error(Error::internal(std::string("internal error: ") + e.what()));
  }
}

} // namespace

Result<Delivered> deliver(int in_fd, StreamContent content, const struct stat& file_stat, const DeliverTo& to,
                          const std::string& shown)
{
  return undone_on_error([&](Made& made) { return deliver_into(in_fd, content, file_stat, to, shown, made); });
}

Result<Delivered> deliver_dir(const DeliverTo& to, const std::function<Result<Delivered>(int dest_dir_fd)>& fill)
{
  return undone_on_error([&](Made& made) -> Result<Delivered> {
    std::string name;
    auto parent = open_parent(to.tmpdir_fd, to.dest, name, made);
    if (!parent) {
      return parent.error();
    }
    auto dir = make_dest_dir(parent->get(), name, to.dest, made);
    if (!dir) {
      return dir.error();
    }
    auto out = fill(dir->get());
    if (out) {
      ::fchmod(dir->get(), 0755);
    }
    return out;
  });
}

std::string outermost_missing(int root_fd, const std::string& dest)
{
  for (std::size_t j = dest.find('/');; j = dest.find('/', j + 1)) {
    const std::string prefix = dest.substr(0, j);
    struct stat st {};
    if (::fstatat(root_fd, prefix.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      return prefix;
    }
    if (j == std::string::npos) {
      return "";
    }
  }
}

Result<std::vector<std::string>> stage_all(const std::vector<CheckedSource>& sources, int tmpdir_fd,
                                           const std::string& tmpdir_path, const StageLimits& limits)
{
  Made made;
  const CheckedSource* current = nullptr;
  // The source's name once, then the option's: "--stage-data: SRC: reason".
  auto fail = [&](const Error& e) {
    try {
      undo(made);
    } catch (...) { // out of memory again: what is left goes with the job's directory
    }
    return current ? e.with_context(current->shown).with_context("--stage-data") : e.with_context("--stage-data");
  };
  try {
    auto lines = stage_sources(sources, tmpdir_fd, tmpdir_path, limits, made, current);
    if (!lines) {
      return fail(lines.error());
    }
    return lines;
  } catch (const std::bad_alloc&) {
    return fail(Error{ErrorKind::limit, ENOMEM, "out of memory on this node"});
  } catch (const std::exception& e) {
    return fail(Error::internal(std::string("internal error: ") + e.what()));
  }
}

} // namespace stagehand::stage
