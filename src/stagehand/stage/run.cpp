// The staging run: destinations, copies and unpacking, summary lines, cleanup on failure.
#include "stagehand/stage/run.hpp"

#include "stagehand/fs/remove_tree.hpp"
#include "stagehand/stage/copy.hpp"
#include "stagehand/stage/extract.hpp"
#include "stagehand/util/fd.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

namespace stagehand::stage {

namespace {

std::string human_bytes(std::uint64_t b)
{
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

using Made = std::vector<std::pair<UniqueFd, std::string>>; // (parent fd, name), in creation order

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
    if (::mkdirat(cur.get(), comp.c_str(), 0755) == 0) {
      made.emplace_back(UniqueFd(::fcntl(cur.get(), F_DUPFD_CLOEXEC, 0)), comp);
    } else if (errno != EEXIST) {
      return Error::from_errno("cannot create " + dest.substr(0, j));
    }
    UniqueFd next(::openat(cur.get(), comp.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!next.valid()) {
      return Error::from_errno(dest.substr(0, j));
    }
    cur = std::move(next);
    i = j + 1;
  }
}

} // namespace

Result<std::vector<std::string>> stage_all(const std::vector<CheckedSource>& sources, int tmpdir_fd,
                                           const std::string& tmpdir_path, const StageLimits& limits)
{
  std::vector<std::string> lines;
  Made made; // every directory and destination this run created, in creation order
  std::uint64_t total = 0;
  auto undo = [&] {
    for (auto it = made.rbegin(); it != made.rend(); ++it) {
      (void)fs::remove_tree(it->first.get(), it->second);
    }
  };
  for (const auto& src : sources) {
    const auto t0 = std::chrono::steady_clock::now();
    auto fail = [&](const std::string& why) {
      undo();
      return Error::invalid("--stage-data: " + src.shown + ": " + why);
    };
    std::string name;
    auto parent = open_parent(tmpdir_fd, src.dest, name, made);
    if (!parent) {
      return fail(parent.error().message);
    }
    UniqueFd in(::open(src.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | (src.is_dir ? O_DIRECTORY : 0)));
    if (!in.valid()) {
      return fail(errno == ENOENT ? "vanished since submission" : Error::from_errno(src.path).message);
    }
    const std::uint64_t room = limits.max_bytes > total ? limits.max_bytes - total : 0;
    std::uint64_t files = 0;
    std::uint64_t bytes = 0;
    const char* how = "copied";
    // The content decides, here too: a file is unpacked only if it really is an archive.
    bool unpack = false;
    if (!src.is_dir && src.unpack) {
      auto kind = probe_archive(in.get());
      unpack = kind && *kind == ArchiveKind::archive;
    }
    if (src.is_dir || unpack) {
      if (::mkdirat(parent->get(), name.c_str(), 0700) != 0) {
        return fail(Error::from_errno("cannot create $SLURM_TMPDIR/" + src.dest).message);
      }
      made.emplace_back(UniqueFd(::fcntl(parent->get(), F_DUPFD_CLOEXEC, 0)), name);
      UniqueFd dest(::openat(parent->get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!dest.valid()) {
        return fail(Error::from_errno("$SLURM_TMPDIR/" + src.dest).message);
      }
      if (src.is_dir) {
        CopyStats stats;
        if (auto st = copy_tree(in.get(), dest.get(), room, stats, src.shown); !st) {
          return fail(st.error().message);
        }
        files = stats.files;
        bytes = stats.bytes;
        ::fchmod(dest.get(), 0755);
      } else {
        ExtractLimits el;
        el.max_bytes = room;
        el.writer_threads = limits.writer_threads;
        auto stats = extract_archive(in.get(), dest.get(), el, src.shown);
        if (!stats) {
          // extract_archive's message starts with the source already.
          undo();
          return Error::invalid("--stage-data: " + stats.error().message);
        }
        files = stats->files + stats->hardlinks;
        bytes = stats->bytes;
        how = "unpacked";
        ::fchmod(dest.get(), 0755);
      }
    } else {
      CopyStats stats;
      made.emplace_back(UniqueFd(::fcntl(parent->get(), F_DUPFD_CLOEXEC, 0)), name);
      if (auto st = copy_file(in.get(), parent->get(), name, room, stats, src.shown); !st) {
        return fail(st.error().message);
      }
      files = 1;
      bytes = stats.bytes;
    }
    total += bytes;
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char line[512];
    std::snprintf(line, sizeof line, "%s %s -> %s/%s: %llu files, %s in %.2f s (no cache)", how, src.shown.c_str(),
                  tmpdir_path.c_str(), src.dest.c_str(), static_cast<unsigned long long>(files),
                  human_bytes(bytes).c_str(), secs);
    lines.emplace_back(line);
  }
  return lines;
}

} // namespace stagehand::stage
