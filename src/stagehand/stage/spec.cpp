// Stage spec grammar and submit-time checks.
#include "stagehand/stage/spec.hpp"

#include "stagehand/fs/walk.hpp"
#include "stagehand/stage/entry_path.hpp"
#include "stagehand/stage/request.hpp"
#include "stagehand/stage/source.hpp"
#include "stagehand/util/fd.hpp"
#include "stagehand/util/strings.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <memory>

namespace stagehand::stage {

namespace {

constexpr std::string_view k_archive_suffixes[] = {".tar.gz", ".tar.bz2", ".tar.xz", ".tar.zst", ".tgz", ".tbz2",
                                                   ".txz",    ".tzst",    ".tar",    ".zip"};

Error refuse(const std::string& shown, const std::string& why, const std::string& base_dir = {},
             ErrorKind kind = ErrorKind::refused)
{
  std::string msg = "--stage-data: " + shown + ": " + why;
  if (!base_dir.empty() && !shown.empty() && shown.front() != '/') {
    msg += " (relative to " + base_dir + ")";
  }
  return Error{kind, kind == ErrorKind::limit ? EFBIG : EINVAL, std::move(msg)};
}

// Normalises a destination: relative, no "..", at least one component.
Result<std::string> normal_dest(const std::string& shown, std::string_view dest)
{
  if (!dest.empty() && dest.front() == '/') {
    return refuse(shown, "destination \"" + std::string(dest) + "\" must be relative to SLURM_TMPDIR");
  }
  auto parts = split_entry_path(dest);
  if (!parts || parts->empty()) {
    return refuse(shown, "destination \"" + std::string(dest) + "\" must stay inside SLURM_TMPDIR");
  }
  std::string out;
  for (const auto& p : *parts) {
    if (out.empty() && std::string_view(p).starts_with(k_state_dir)) {
      return refuse(shown, "destination \"" + std::string(dest) + "\" is reserved");
    }
    append_joined(out, "/", p);
  }
  return out;
}

// Sums the sizes of the regular files below an open directory; every entry must be readable.
// fs::walk_tree keeps two descriptors open whatever the shape (21,841 class folders, a 500-deep
// chain) and never follows a symlink or enters another mount.
Result<std::uint64_t> tree_bytes(int dir_fd, const std::string& shown)
{
  std::uint64_t total = 0;
  auto walked = fs::walk_tree(dir_fd, [&](const fs::WalkEntry& e) -> Result<fs::WalkControl> {
    if (S_ISREG(e.st.st_mode)) {
      if (::faccessat(e.parent_fd, e.name.c_str(), R_OK, AT_EACCESS) != 0) {
        return Error::from_errno(shown + "/" + e.rel);
      }
      total += static_cast<std::uint64_t>(e.st.st_size);
    }
    return fs::WalkControl::go_on;
  });
  if (!walked) { // "rel: reason" below the source
    Error e = walked.error();
    if (!e.message.starts_with(shown + "/")) {
      e.message = shown + "/" + e.message;
    }
    return e;
  }
  return total;
}

// The default destination: the relative source path, or the basename for an absolute source (or
// a relative one that climbs out with "..").
std::string relative_default(const std::string& src, const std::string& canonical)
{
  if (src.front() != '/' && src.find("..") == std::string::npos) {
    return src;
  }
  return canonical.substr(canonical.rfind('/') + 1);
}

} // namespace

Result<std::vector<StageSpec>> parse_stage_option(std::string_view value)
{
  std::vector<StageSpec> specs;
  if (value.empty() || value == "(null)") {
    return Error::refused("--stage-data: needs SRC[:DEST][,SRC[:DEST]...]");
  }
  for (std::string_view item : split(value, ',')) {
    if (item.empty()) {
      return Error::refused("--stage-data: empty entry in \"" + std::string(value) + "\"");
    }
    StageSpec spec;
    std::size_t c1 = item.find(':');
    spec.src = std::string(item.substr(0, c1));
    if (c1 != std::string_view::npos) {
      std::string_view rest = item.substr(c1 + 1);
      std::size_t c2 = rest.find(':');
      spec.dest = std::string(rest.substr(0, c2));
      if (c2 != std::string_view::npos) {
        std::string_view flag = rest.substr(c2 + 1);
        if (flag != "copy") {
          return Error::refused("--stage-data: " + std::string(item) + ": unknown flag \"" + std::string(flag) +
                                "\" (the only one is :copy)");
        }
        spec.unpack = Unpack::never;
      }
    }
    if (spec.src.empty()) {
      return Error::refused("--stage-data: " + std::string(item) + ": no source");
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

std::string strip_archive_suffix(std::string_view name)
{
  for (std::string_view suffix : k_archive_suffixes) {
    if (name.size() > suffix.size() && name.ends_with(suffix)) {
      return std::string(name.substr(0, name.size() - suffix.size()));
    }
  }
  return std::string(name);
}

Result<std::vector<CheckedSource>> check_sources(const std::vector<StageSpec>& specs, const std::string& base_dir,
                                                 const StageConfig& config, const ArchiveProbe& probe)
{
  std::vector<CheckedSource> out;
  std::uint64_t total = 0;
  for (const auto& spec : specs) {
    CheckedSource c;
    c.shown = spec.src;
    c.mode = spec.unpack;
    std::string joined = spec.src.front() == '/' ? spec.src : base_dir + "/" + spec.src;
    char resolved[PATH_MAX];
    if (!::realpath(joined.c_str(), resolved)) {
      return refuse(spec.src, errno == ENOENT ? "no such file or directory" : std::strerror(errno), base_dir);
    }
    c.path = resolved;
    // One open, every decision on the descriptor (the node opens the same way while staging).
    auto opened = open_source(c.path, SourceKind::any, config.allowed_roots);
    if (!opened) {
      return refuse(spec.src, opened.error().message, base_dir);
    }
    const int fd = opened->fd.get();
    const struct stat& st = opened->st;
    std::string default_dest;
    if (S_ISDIR(st.st_mode)) {
      c.is_dir = true;
      auto bytes = tree_bytes(fd, spec.src);
      if (!bytes) {
        const bool mount = bytes.error().code == EXDEV; // a mount inside: said as it is
        return refuse(spec.src, (mount ? "" : "unreadable: ") + bytes.error().message, base_dir);
      }
      c.bytes = *bytes;
      default_dest = relative_default(spec.src, c.path);
    } else { // open_source let only a file or a directory through
      c.bytes = static_cast<std::uint64_t>(st.st_size);
      if (spec.unpack == Unpack::if_archive) {
        c.unpack = probe ? probe(fd) : true; // without a probe: decided on the node
      }
      std::string name = relative_default(spec.src, c.path);
      default_dest = c.unpack ? strip_archive_suffix(name) : name;
    }
    auto dest = normal_dest(spec.src, spec.dest.empty() ? default_dest : spec.dest);
    if (!dest) {
      return dest.error();
    }
    c.dest = *dest;
    for (const auto& other : out) {
      if (path_under(c.dest, other.dest) || path_under(other.dest, c.dest)) {
        return refuse(spec.src, "destination \"" + c.dest + "\" overlaps \"" + other.dest + "\" (from " + other.shown + ")");
      }
    }
    total += c.bytes;
    if (total > config.max_bytes) {
      return refuse(spec.src,
                    "the sources total " + std::to_string(total) + " bytes, over [stage] max_bytes " +
                      std::to_string(config.max_bytes),
                    {}, ErrorKind::limit);
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::string canonical_option(const std::vector<CheckedSource>& sources)
{
  std::string out;
  for (const auto& s : sources) {
    append_joined(out, ",", s.path + ":" + s.dest + (s.mode == Unpack::never ? ":copy" : ""));
  }
  return out;
}

} // namespace stagehand::stage
