// --stage-out grammar and submit-time checks.
#include "stagehand/stageout/spec.hpp"

#include "stagehand/util/strings.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace stagehand::stageout {

namespace {

// Collapses "." and repeated slashes; keeps ".." (callers refuse it where it matters).
std::string normalise(std::string_view path)
{
  const bool absolute = !path.empty() && path[0] == '/';
  std::string out;
  for (const auto& part : split(path, '/')) {
    if (part.empty() || part == ".") {
      continue;
    }
    if (part == ".." && absolute && !out.empty()) {
      out.erase(out.rfind('/'));
      continue;
    }
    if (part == ".." && absolute) {
      continue; // "/.." is "/"
    }
    out += '/';
    out += part;
  }
  if (!absolute) {
    return out.empty() ? "" : out.substr(1);
  }
  return out.empty() ? "/" : out;
}

Error bad(std::string_view entry, const std::string& why)
{
  return Error::refused("--stage-out: \"" + std::string(entry) + "\": " + why);
}

std::string expand(std::string_view dest, std::uint32_t job_id, const std::string& node)
{
  std::string out;
  for (std::size_t i = 0; i < dest.size(); ++i) {
    if (dest[i] == '%' && i + 1 < dest.size()) {
      const char c = dest[i + 1];
      if (c == 'j' || c == 'n' || c == '%') {
        out += c == 'j' ? std::to_string(job_id) : c == 'n' ? node : std::string("%");
        ++i;
        continue;
      }
    }
    out += dest[i];
  }
  return out;
}

std::string shown(const OutSpec& s) { return s.dest.empty() ? s.src : s.src + ":" + s.dest; }

} // namespace

bool is_glob(std::string_view src)
{
  const auto slash = src.rfind('/');
  const auto last = slash == std::string_view::npos ? src : src.substr(slash + 1);
  return last.find_first_of("*?[") != std::string_view::npos;
}

bool per_node(const OutSpec& spec)
{
  for (std::size_t i = 0; i + 1 < spec.dest.size(); ++i) {
    if (spec.dest[i] == '%') {
      if (spec.dest[i + 1] == 'n') {
        return true;
      }
      ++i; // "%%n" is a literal "%n"
    }
  }
  return false;
}

Result<std::vector<OutSpec>> parse_option(std::string_view value)
{
  std::vector<OutSpec> specs;
  if (value.empty()) {
    return Error::refused("--stage-out: needs SRC[:DEST][,...] (SRC relative to SLURM_TMPDIR)");
  }
  for (const auto& entry : split(value, ',')) {
    if (entry.empty()) {
      return bad(value, "empty entry (two commas, or a comma at an end)");
    }
    const auto colon = entry.find(':');
    OutSpec s;
    std::string src(entry.substr(0, colon));
    if (colon != std::string_view::npos) {
      s.dest = std::string(entry.substr(colon + 1));
      if (s.dest.find(':') != std::string::npos) {
        return bad(entry, "more than one ':' (expected SRC[:DEST])");
      }
      if (s.dest.empty()) {
        return bad(entry, "empty DEST after ':'");
      }
    }
    if (src.empty()) {
      return bad(entry, "empty SRC");
    }
    if (src[0] == '/') {
      return bad(entry, "SRC must be relative to SLURM_TMPDIR, not absolute");
    }
    for (const auto& part : split(src, '/')) {
      if (part == "..") {
        return bad(entry, "SRC must stay inside SLURM_TMPDIR (no \"..\")");
      }
    }
    s.src = normalise(src);
    if (s.src.empty()) {
      return bad(entry, "SRC names SLURM_TMPDIR itself; name what to copy (e.g. out, or *)");
    }
    if (s.src == ".stagehand" || s.src.starts_with(".stagehand/")) {
      return bad(entry, "SRC .stagehand is stagehand's own state");
    }
    const auto slash = s.src.rfind('/');
    if (slash != std::string::npos && s.src.substr(0, slash).find_first_of("*?[") != std::string::npos) {
      return bad(entry, "a glob may only be in SRC's last component (e.g. ckpt/*.pt)");
    }
    specs.push_back(std::move(s));
  }
  return specs;
}

std::string dest_path(const OutSpec& spec, const std::string& submit_dir, std::uint32_t job_id, const std::string& node)
{
  std::string dest = spec.dest;
  if (dest.empty()) {
    const auto slash = spec.src.rfind('/');
    dest = !is_glob(spec.src) ? spec.src : slash == std::string::npos ? "." : spec.src.substr(0, slash);
  }
  dest = expand(dest, job_id, node);
  return normalise(dest[0] == '/' ? dest : submit_dir + "/" + dest);
}

Status check_at_submit(const std::vector<OutSpec>& specs, const std::string& submit_dir)
{
  for (const auto& s : specs) {
    // The part of DEST before a %j/%n is known now; below it the node creates directories.
    std::string dest = s.dest.empty() ? dest_path(s, submit_dir, 0, "") : s.dest;
    const auto pct = dest.find('%');
    const bool templated = pct != std::string::npos;
    if (templated) {
      const auto cut = dest.rfind('/', pct);
      dest = cut == std::string::npos ? "" : dest.substr(0, cut == 0 ? 1 : cut);
    }
    dest = dest.empty() ? normalise(submit_dir) : normalise(dest[0] == '/' ? dest : submit_dir + "/" + dest);
    // DEST itself when it exists; else its deepest existing ancestor, where it will be created.
    std::string probe = dest;
    bool exists_itself = !templated;
    for (;;) {
      struct stat st {};
      if (::stat(probe.c_str(), &st) == 0) {
        if (!S_ISDIR(st.st_mode)) {
          if (probe == dest && exists_itself && !is_glob(s.src)) {
            // A file SRC may replace a file DEST: its directory must be writable.
            exists_itself = false;
            probe = probe.substr(0, std::max<std::size_t>(1, probe.rfind('/')));
            continue;
          }
          return Error::refused("--stage-out: " + shown(s) + ": " + probe + " is not a directory");
        }
        if (::access(probe.c_str(), W_OK | X_OK) != 0) {
          return Error::refused("--stage-out: " + shown(s) + ": " + probe + " is not writable by you (" +
                                std::strerror(errno) + ")");
        }
        return ok_status();
      }
      if (errno != ENOENT) {
        return Error::refused("--stage-out: " + shown(s) + ": cannot check " + probe + " (" + std::strerror(errno) + ")");
      }
      exists_itself = false;
      if (probe == "/") {
        return Error::refused("--stage-out: " + shown(s) + ": no existing directory above " + dest);
      }
      probe = probe.substr(0, std::max<std::size_t>(1, probe.rfind('/')));
    }
  }
  return ok_status();
}

std::string canonical_option(const std::vector<OutSpec>& specs, const std::string& submit_dir)
{
  std::string out;
  for (const auto& s : specs) {
    if (!out.empty()) {
      out += ',';
    }
    std::string dest = s.dest;
    if (dest.empty()) {
      const auto slash = s.src.rfind('/');
      dest = !is_glob(s.src) ? s.src : slash == std::string::npos ? "." : s.src.substr(0, slash);
    }
    // Relative to the submit directory, keeping %j/%n (and "%%") for the node to expand.
    out += s.src + ":" + normalise(dest[0] == '/' ? dest : submit_dir + "/" + dest);
  }
  return out;
}

} // namespace stagehand::stageout
