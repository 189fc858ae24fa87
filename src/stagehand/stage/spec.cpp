// Stage spec grammar and submit-time checks.
#include "stagehand/stage/spec.hpp"

#include "stagehand/fs/walk.hpp"
#include "stagehand/archive/entry_path.hpp"
#include "stagehand/stage/request.hpp"
#include "stagehand/stage/source.hpp"
#include "stagehand/util/fd.hpp"
#include "stagehand/util/strings.hpp"

#include <dirent.h>
#include <pwd.h>
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

// `where`: the directory a relative source was looked for in, or "= PATH" for what "~" became.
Error refuse(const std::string& shown, const std::string& why, const std::string& where = {},
             ErrorKind kind = ErrorKind::refused)
{
  std::string msg = "--stage-data: " + shown + ": " + why;
  if (where.starts_with("= ")) {
    msg += " (" + where.substr(2) + ")";
  } else if (!where.empty()) {
    msg += " (relative to " + where + ")";
  }
  return Error{kind, kind == ErrorKind::limit ? EFBIG : EINVAL, std::move(msg)};
}

// Normalises a destination: relative, no "..", at least one component.
Result<std::string> normal_dest(const std::string& shown, std::string_view dest)
{
  if (!dest.empty() && dest.front() == '/') {
    return refuse(shown, "destination \"" + std::string(dest) + "\" must be relative to SLURM_TMPDIR");
  }
  auto parts = archive::split_entry_path(dest);
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

constexpr std::string_view k_need = "--stage-data: needs SRC[:DEST][,SRC[:DEST]...]";

// One spec from its fields (already unescaped); `item` is the spec as written, for messages.
Result<StageSpec> make_spec(std::vector<std::string>& fields, Tilde tilde, const std::string& item)
{
  StageSpec spec;
  spec.src = std::move(fields[0]);
  spec.tilde = tilde;
  if (fields.size() > 1) {
    spec.dest = std::move(fields[1]);
  }
  if (fields.size() > 2) {
    std::string flag = fields[2];
    for (std::size_t i = 3; i < fields.size(); ++i) {
      flag += ":" + fields[i];
    }
    if (flag == "copy") {
      spec.unpack = Unpack::never;
    } else if (flag == "auto" && !spec.dest.empty()) {
      spec.dest_from = DestFrom::source_name;
    } else {
      return Error::refused("--stage-data: " + item + ": unknown flag \"" + flag +
                            "\" (the only one is :copy; write \\: for a colon in a name)");
    }
  }
  if (spec.src.empty()) {
    return Error::refused("--stage-data: " + item + ": no source");
  }
  return spec;
}

} // namespace

Result<std::vector<StageSpec>> parse_stage_option(std::string_view value)
{
  std::vector<StageSpec> specs;
  if (value.empty() || value == "(null)") {
    return Error::refused(std::string(k_need));
  }
  std::vector<std::string> fields(1);
  std::string item; // as written
  Tilde tilde = Tilde::literal;
  auto finish = [&]() -> Status {
    if (item.empty()) {
      return Error::refused("--stage-data: empty entry in \"" + std::string(value) + "\"");
    }
    auto spec = make_spec(fields, tilde, item);
    if (!spec) {
      return spec.error();
    }
    specs.push_back(std::move(*spec));
    fields.assign(1, std::string());
    item.clear();
    tilde = Tilde::literal;
    return ok_status();
  };
  for (std::size_t i = 0; i < value.size(); ++i) {
    const char ch = value[i];
    if (ch == '\\') {
      if (i + 1 == value.size()) {
        return Error::refused("--stage-data: \"" + std::string(value) + "\" ends with a lone backslash");
      }
      fields.back() += value[++i];
      item += value.substr(i - 1, 2);
      continue;
    }
    if (ch == ',') {
      if (auto done = finish(); !done) {
        return done.error();
      }
      continue;
    }
    if (ch == ':') {
      fields.emplace_back();
    } else {
      if (ch == '~' && item.empty()) {
        tilde = Tilde::expand;
      }
      fields.back() += ch;
    }
    item += ch;
  }
  if (auto done = finish(); !done) {
    return done.error();
  }
  return specs;
}

std::string escape_spec_field(std::string_view name)
{
  std::string out;
  out.reserve(name.size());
  for (char ch : name) {
    if (ch == '\\' || ch == ',' || ch == ':') {
      out += '\\';
    }
    out += ch;
  }
  return out;
}

std::string expand_tilde(std::string_view src, Tilde tilde)
{
  if (tilde != Tilde::expand || src.empty() || src.front() != '~') {
    return std::string(src);
  }
  const std::size_t slash = src.find('/');
  const std::string user(src.substr(1, slash == std::string_view::npos ? std::string_view::npos : slash - 1));
  const std::string_view rest = slash == std::string_view::npos ? std::string_view() : src.substr(slash);
  std::string home;
  std::vector<char> buf(16384);
  struct passwd pw {};
  struct passwd* found = nullptr;
  if (user.empty()) {
    const char* env_home = std::getenv("HOME");
    if (env_home && env_home[0] == '/') {
      home = env_home;
    } else if (::getpwuid_r(::getuid(), &pw, buf.data(), buf.size(), &found) == 0 && found) {
      home = found->pw_dir;
    }
  } else if (::getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found) == 0 && found) {
    home = found->pw_dir;
  }
  if (home.empty()) {
    return std::string(src); // as the shell: an unknown name stays as written
  }
  while (home.size() > 1 && home.back() == '/' && !rest.empty()) {
    home.pop_back();
  }
  return home == "/" && !rest.empty() ? std::string(rest) : home + std::string(rest);
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

namespace {

// What check_sources checks each spec against.
struct SourceChecks
{
  const std::string& base_dir;
  const StageConfig& config;
  const ArchiveProbe& probe;
};

// Where the source goes: `spec`'s destination or `default_dest`, without the suffix of an archive
// named after its source that unpacks.
Status name_dest(CheckedSource& c, const StageSpec& spec, const std::string& default_dest)
{
  c.dest_from = spec.dest.empty() ? DestFrom::source_name : spec.dest_from;
  auto named = normal_dest(spec.src, spec.dest.empty() ? default_dest : spec.dest);
  if (!named) {
    return named.error();
  }
  c.named_dest = *named;
  c.dest = c.named_dest;
  if (c.kind == SourceKind::file && c.unpack && c.dest_from == DestFrom::source_name) {
    auto stripped = normal_dest(spec.src, strip_archive_suffix(c.named_dest)); // only an archive that unpacks
    if (!stripped) {
      return stripped.error();
    }
    c.dest = *stripped;
  }
  return ok_status();
}

// One spec: its source resolved, opened and measured, and its destination.
Result<CheckedSource> check_source(const StageSpec& spec, const SourceChecks& checks)
{
  CheckedSource c;
  c.shown = spec.src;
  c.mode = spec.unpack;
  const std::string src = expand_tilde(spec.src, spec.tilde);
  // Said after a message: where a relative source was looked for, or what "~" became.
  const std::string where = src.front() != '/' ? checks.base_dir : src != spec.src ? "= " + src : std::string();
  std::string joined = src.front() == '/' ? src : checks.base_dir + "/" + src;
  char resolved[PATH_MAX];
  if (!::realpath(joined.c_str(), resolved)) {
    return refuse(spec.src, errno == ENOENT ? "no such file or directory" : std::strerror(errno), where);
  }
  c.path = resolved;
  // One open, every decision on the descriptor (the node opens the same way while staging).
  auto opened = open_source(c.path, std::nullopt, checks.config.allowed_roots);
  if (!opened) {
    return refuse(spec.src, opened.error().message, where);
  }
  const int fd = opened->fd.get();
  const struct stat& st = opened->st;
  std::string default_dest;
  if (S_ISDIR(st.st_mode)) {
    c.kind = SourceKind::dir;
    auto bytes = tree_bytes(fd, spec.src);
    if (!bytes) {
      const bool mount = bytes.error().code == EXDEV; // a mount inside: said as it is
      return refuse(spec.src, (mount ? "" : "unreadable: ") + bytes.error().message, where);
    }
    c.bytes = *bytes;
    default_dest = relative_default(src, c.path);
  } else { // open_source let only a file or a directory through
    c.bytes = static_cast<std::uint64_t>(st.st_size);
    if (spec.unpack == Unpack::if_archive) {
      c.unpack = checks.probe ? checks.probe(fd) : true; // without a probe: decided on the node
      c.decided = static_cast<bool>(checks.probe);
    }
    default_dest = relative_default(src, c.path);
  }
  if (auto named = name_dest(c, spec, default_dest); !named) {
    return named.error();
  }
  return c;
}

// Whether `c` is listed already (the same source to the same place, one per #SBATCH line, twice:
// once); a destination that overlaps another one is refused.
Result<bool> listed_already(const std::vector<CheckedSource>& out, const CheckedSource& c)
{
  for (const auto& other : out) {
    if (other.path == c.path && other.dest == c.dest && other.mode == c.mode) {
      return true;
    }
    if (path_under(c.dest, other.dest) || path_under(other.dest, c.dest)) {
      return refuse(c.shown,
                    "destination \"" + c.dest + "\" overlaps \"" + other.dest + "\" (from " + other.shown + ")");
    }
  }
  return false;
}

} // namespace

Result<std::vector<CheckedSource>> check_sources(const std::vector<StageSpec>& specs, const std::string& base_dir,
                                                 const StageConfig& config, const ArchiveProbe& probe)
{
  const SourceChecks checks{base_dir, config, probe};
  std::vector<CheckedSource> out;
  std::uint64_t total = 0;
  for (const auto& spec : specs) {
    auto c = check_source(spec, checks);
    if (!c) {
      return c.error();
    }
    auto merged = listed_already(out, *c);
    if (!merged) {
      return merged.error();
    }
    if (*merged) {
      continue;
    }
    // max_bytes counts what will be written: an archive that unpacks counts while it unpacks (the
    // extractor stops at the limit), never by its packed size; without a probe, a file named like
    // an archive is taken for one.
    const bool unpacks = c->kind == SourceKind::file && c->unpack &&
                         (c->decided || strip_archive_suffix(c->named_dest) != c->named_dest);
    total += unpacks ? 0 : c->bytes;
    if (total > config.max_bytes) {
      return refuse(spec.src,
                    "the sources total " + std::to_string(total) + " bytes, over [stage] max_bytes " +
                      std::to_string(config.max_bytes),
                    {}, ErrorKind::limit);
    }
    out.push_back(std::move(*c));
  }
  return out;
}

std::string canonical_option(const std::vector<CheckedSource>& sources)
{
  std::string out;
  for (const auto& s : sources) {
    std::string spec = escape_spec_field(s.path) + ":";
    if (s.kind == SourceKind::file && !s.decided && s.dest_from == DestFrom::source_name) {
      // Not looked at: the name as it is; the node drops the suffix if it unpacks.
      spec += escape_spec_field(s.named_dest) + ":auto";
    } else {
      spec += escape_spec_field(s.dest) + (s.mode == Unpack::never ? ":copy" : "");
    }
    append_joined(out, ",", spec);
  }
  return out;
}

} // namespace stagehand::stage
