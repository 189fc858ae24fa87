// Stage spec grammar and submit-time checks.
#include "stagehand/stage/spec.hpp"
#include "stagehand/util/strings.hpp"

#include "stagehand/fs/dir_stream.hpp"
#include "stagehand/stage/entry_path.hpp"
#include "stagehand/util/fd.hpp"

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

Error refuse(const std::string& shown, const std::string& why, const std::string& base_dir = {})
{
  std::string msg = "--stage-data: " + shown + ": " + why;
  if (!base_dir.empty() && !shown.empty() && shown.front() != '/') {
    msg += " (relative to " + base_dir + ")";
  }
  return Error::invalid(msg);
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
    if (p.rfind(".stagehand", 0) == 0 && out.empty()) {
      return refuse(shown, "destination \"" + std::string(dest) + "\" is reserved");
    }
    out += (out.empty() ? "" : "/") + p;
  }
  return out;
}

bool under(const std::string& path, const std::string& root)
{
  std::string r = root;
  while (r.size() > 1 && r.back() == '/') {
    r.pop_back();
  }
  return path == r || (path.size() > r.size() && path.compare(0, r.size(), r) == 0 && (r == "/" || path[r.size()] == '/'));
}

// Sums the sizes of the regular files below an open directory; every entry must be readable.
Result<std::uint64_t> tree_bytes(int dir_fd, const std::string& shown)
{
  std::uint64_t total = 0;
  std::vector<std::pair<UniqueFd, std::string>> stack;
  stack.emplace_back(UniqueFd(::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC)), shown);
  while (!stack.empty()) {
    auto [fd, path] = std::move(stack.back());
    stack.pop_back();
    fs::DirStream stream = fs::dir_stream(std::move(fd));
    if (!stream) {
      return Error::from_errno(path);
    }
    DIR* d = stream.get();
    while (struct dirent* e = ::readdir(d)) {
      std::string_view n = e->d_name;
      if (n == "." || n == "..") {
        continue;
      }
      struct stat st {};
      if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return Error::from_errno(path + "/" + e->d_name);
      }
      if (S_ISDIR(st.st_mode)) {
        UniqueFd sub(::openat(::dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!sub.valid()) {
          return Error::from_errno(path + "/" + e->d_name);
        }
        stack.emplace_back(std::move(sub), path + "/" + e->d_name);
      } else if (S_ISREG(st.st_mode)) {
        if (::faccessat(::dirfd(d), e->d_name, R_OK, AT_EACCESS) != 0) {
          return Error::from_errno(path + "/" + e->d_name);
        }
        total += static_cast<std::uint64_t>(st.st_size);
      }
    }
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
    return Error::invalid("--stage-data: needs SRC[:DEST][,SRC[:DEST]...]");
  }
  for (std::string_view item : split(value, ',')) {
    if (item.empty()) {
      return Error::invalid("--stage-data: empty entry in \"" + std::string(value) + "\"");
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
          return Error::invalid("--stage-data: " + std::string(item) + ": unknown flag \"" + std::string(flag) +
                                "\" (the only one is :copy)");
        }
        spec.unpack = Unpack::never;
      }
    }
    if (spec.src.empty()) {
      return Error::invalid("--stage-data: " + std::string(item) + ": no source");
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
    if (!config.allowed_roots.empty()) {
      bool ok = false;
      for (const auto& root : config.allowed_roots) {
        ok = ok || under(c.path, root);
      }
      if (!ok) {
        return refuse(spec.src, c.path + " is not under [stage] allowed_roots", base_dir);
      }
    }
    UniqueFd fd(::open(c.path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
    if (!fd.valid()) {
      return refuse(spec.src, errno == EACCES ? "permission denied" : std::strerror(errno), base_dir);
    }
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0) {
      return refuse(spec.src, std::strerror(errno), base_dir);
    }
    std::string default_dest;
    if (S_ISDIR(st.st_mode)) {
      c.is_dir = true;
      auto bytes = tree_bytes(fd.get(), spec.src);
      if (!bytes) {
        return refuse(spec.src, "unreadable: " + bytes.error().message, base_dir);
      }
      c.bytes = *bytes;
      default_dest = relative_default(spec.src, c.path);
    } else if (S_ISREG(st.st_mode)) {
      c.bytes = static_cast<std::uint64_t>(st.st_size);
      if (spec.unpack == Unpack::if_archive) {
        c.unpack = probe ? probe(fd.get()) : true; // without a probe: decided on the node
      }
      std::string name = relative_default(spec.src, c.path);
      default_dest = c.unpack ? strip_archive_suffix(name) : name;
    } else {
      return refuse(spec.src, "not a regular file or directory", base_dir);
    }
    auto dest = normal_dest(spec.src, spec.dest.empty() ? default_dest : spec.dest);
    if (!dest) {
      return dest.error();
    }
    c.dest = *dest;
    for (const auto& other : out) {
      if (under(c.dest, other.dest) || under(other.dest, c.dest)) {
        return refuse(spec.src, "destination \"" + c.dest + "\" overlaps \"" + other.dest + "\" (from " + other.shown + ")");
      }
    }
    total += c.bytes;
    if (total > config.max_bytes) {
      return refuse(spec.src, "the sources total " + std::to_string(total) + " bytes, over [stage] max_bytes " +
                                std::to_string(config.max_bytes));
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::string done_marker(std::string_view specs)
{
  std::uint64_t h = 14695981039346656037ULL; // FNV-1a
  for (unsigned char c : specs) {
    h = (h ^ c) * 1099511628211ULL;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "done-%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string canonical_option(const std::vector<CheckedSource>& sources)
{
  std::string out;
  for (const auto& s : sources) {
    out += (out.empty() ? "" : ",") + s.path + ":" + s.dest + (s.mode == Unpack::never ? ":copy" : "");
  }
  return out;
}

} // namespace stagehand::stage
