// stage-run: check the specs again (as the user), then stage exactly once per node per job. Tasks
// on the node serialise on a lock in $SLURM_TMPDIR/.stagehand; the first stages, the others (and
// later steps) find its result there.
#include "stage_run.hpp"

#include "stagehand/stage/extract.hpp"
#include "stagehand/stage/run.hpp"
#include "stagehand/stage/spec.hpp"
#include "stagehand/util/fd.hpp"
#include "stagehand/util/units.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

namespace stagehand::cli {

namespace {

constexpr const char* k_usage =
  "usage: stagehand stage-run --tmpdir DIR --node NAME [--base DIR] [--max-bytes SIZE] [--allowed-root DIR]... SPECS";

std::string read_all(int fd)
{
  std::string s;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) {
    s.append(buf, static_cast<std::size_t>(n));
  }
  return s;
}

void write_marker(int dir_fd, const char* name, const std::string& text)
{
  UniqueFd fd(::openat(dir_fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.valid()) {
    (void)!::write(fd.get(), text.data(), text.size());
  }
}

} // namespace

int stage_run(const std::vector<std::string>& args)
{
  std::string tmpdir, node, base, specs_text;
  StageConfig config;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
    const std::string* v = nullptr;
    if (a == "--tmpdir" && (v = value())) {
      tmpdir = *v;
    } else if (a == "--node" && (v = value())) {
      node = *v;
    } else if (a == "--base" && (v = value())) {
      base = *v;
    } else if (a == "--max-bytes" && (v = value())) {
      auto size = parse_size(*v);
      if (!size) {
        std::fprintf(stderr, "stagehand: stage-run: %s\n", size.error().message.c_str());
        return 2;
      }
      config.max_bytes = *size;
    } else if (a == "--allowed-root" && (v = value())) {
      config.allowed_roots.push_back(*v);
    } else if (specs_text.empty() && !a.starts_with("--")) {
      specs_text = a;
    } else {
      std::fprintf(stderr, "%s\n", k_usage);
      return 2;
    }
  }
  if (tmpdir.empty() || specs_text.empty()) {
    std::fprintf(stderr, "%s\n", k_usage);
    return 2;
  }
  if (base.empty()) {
    char cwd[4096];
    base = ::getcwd(cwd, sizeof cwd) ? cwd : "/";
  }

  UniqueFd root(::open(tmpdir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root.valid()) {
    std::fprintf(stderr, "stagehand: --stage-data: no scratch directory %s on node %s\n", tmpdir.c_str(), node.c_str());
    return 1;
  }
  if (::mkdirat(root.get(), ".stagehand", 0700) != 0 && errno != EEXIST) {
    std::perror("stagehand: --stage-data: .stagehand");
    return 1;
  }
  UniqueFd state(::openat(root.get(), ".stagehand", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  UniqueFd lock(state.valid() ? ::openat(state.get(), "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600) : -1);
  if (!lock.valid() || ::flock(lock.get(), LOCK_EX) != 0) {
    std::perror("stagehand: --stage-data: lock");
    return 1;
  }
  // Another task of this job on this node got here first: reuse its result.
  const std::string done = stage::done_marker(specs_text);
  const std::string failed_name = "failed" + done.substr(4);
  if (::faccessat(state.get(), done.c_str(), F_OK, 0) == 0) {
    return 0;
  }
  if (UniqueFd failed(::openat(state.get(), failed_name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC)); failed.valid()) {
    std::fprintf(stderr, "%s", read_all(failed.get()).c_str());
    return 1;
  }

  auto fail = [&](const std::string& message) {
    std::string line = "stagehand: " + message + " (node " + node + ")\n";
    std::fputs(line.c_str(), stderr);
    write_marker(state.get(), failed_name.c_str(), line);
    return 1;
  };
  auto specs = stage::parse_stage_option(specs_text);
  if (!specs) {
    return fail(specs.error().message);
  }
  auto is_archive = [](int fd) {
    auto kind = stage::probe_archive(fd);
    return kind && *kind == stage::ArchiveKind::archive;
  };
  auto sources = stage::check_sources(*specs, base, config, is_archive);
  if (!sources) {
    return fail(sources.error().message);
  }
  stage::StageLimits limits;
  limits.max_bytes = config.max_bytes;
  auto lines = stage::stage_all(*sources, root.get(), tmpdir, limits);
  if (!lines) {
    return fail(lines.error().message);
  }
  for (const auto& line : *lines) {
    std::printf("stagehand: %s: %s\n", node.c_str(), line.c_str());
  }
  std::fflush(stdout);
  write_marker(state.get(), done.c_str(), "");
  return 0;
}

} // namespace stagehand::cli
