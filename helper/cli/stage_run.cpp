// stage-run: check the specs again (as the user), then stage exactly once per node per job. Tasks
// on the node serialise on a lock in $SLURM_TMPDIR/.stagehand; the first stages, the others (and
// later steps) find its result there. With a node daemon, it stages through the daemon's cache;
// when the daemon cannot (not running, crashed, busy, cannot see the source), it stages in this
// process.
#include "stage_run.hpp"

#include "broadcast.hpp"
#include "progress_reporter.hpp"

#include "stagehand/fs/io.hpp"
#include "stagehand/fs/remove_tree.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/ipc/client.hpp"
#include "stagehand/tmpdir/views.hpp"
#include "stagehand/archive/extract.hpp"
#include "stagehand/stage/request.hpp"
#include "stagehand/stage/run.hpp"
#include "stagehand/stage/spec.hpp"
#include "stagehand/util/fd.hpp"

#include <algorithm>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <optional>

namespace stagehand::cli {

namespace {

void write_marker(int dir_fd, const std::string& name, const std::string& text)
{
  UniqueFd fd(::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.valid()) {
    (void)fs::write_all(fd.get(), text, name); // best effort: the job's output has the line already
  }
}

enum class DaemonOutcome { staged, failed, unavailable };

// What a request to the daemon asks besides the sources: per source, the broadcast's delivered
// copy to read in its place ("" = the source) and a note for its summary; and whether misses
// are read or only reported (`absent` then lists them, by index in the sources given).
struct DaemonAsk
{
  proto::Misses misses = proto::Misses::read;
  std::vector<std::string> copies;
  std::vector<std::string> notes;
  std::vector<std::size_t> absent;
};

// Stages through the daemon. `unavailable` means: stage in-process instead (a line said why, and
// `failure` holds it for the summary lines when a daemon was there: busy, stuck, refused).
DaemonOutcome stage_via_daemon(const stage::StageRequest& a, const std::vector<stage::CheckedSource>& sources,
                               int root_fd, DaemonAsk& ask, std::string& failure)
{
  std::vector<std::string> missing_before;
  for (const auto& s : sources) {
    if (auto m = stage::outermost_missing(root_fd, s.dest); !m.empty()) {
      missing_before.push_back(std::move(m));
    }
  }
  proto::Stage req;
  req.job_id = a.job_id;
  req.max_bytes = a.max_bytes;
  req.misses = ask.misses;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const auto& s = sources[i];
    req.sources.push_back(proto::SourceSpec{s.shown, s.path, s.dest,
                                            s.kind, s.mode,
                                            i < ask.copies.size() ? ask.copies[i] : ""});
  }
  ipc::CallOptions options;
  options.connect_deadline = std::chrono::milliseconds(2000);
  options.idle_deadline = std::chrono::milliseconds(60000); // the daemon sends a frame every few seconds
  const auto t0 = std::chrono::steady_clock::now();
  const std::chrono::seconds interval(a.progress_interval);
  auto next_progress = t0 + interval;
  auto reply = ipc::call(a.socket, req, options, [&](const proto::Progress& p) {
    if (interval.count() > 0 && std::chrono::steady_clock::now() >= next_progress) {
      print_progress(a.node, p);
      next_progress = std::chrono::steady_clock::now() + interval;
    }
  });
  std::string why;
  bool listening = true; // a daemon answered, or took the connection and then failed us
  if (!reply) {
    why = reply.error().message;
    // No daemon on this node (none configured to run, or stopped): the line below says so; the
    // summaries stay as without one.
    listening = reply.error().code != ENOENT && reply.error().code != ECONNREFUSED;
  } else if (reply->error) {
    if (reply->error->kind == ErrorKind::corrupt) {
      // The archive's own bytes are bad: staging here would read the same bytes and fail the same way.
      failure = reply->error->message;
      return DaemonOutcome::failed;
    }
    // Anything else may be the daemon's view, not the job's: a source the daemon cannot see (a
    // unit's sandbox, a mount it lacks), a limit of its own (busy). A daemon problem never fails a
    // job that could run without it: stage here, where the user's own mistakes still fail it.
    why = reply->error->message;
  } else if (auto staged = proto::parse_stage_reply(reply->result_json); !staged) {
    why = staged.error().message;
  } else {
    for (std::size_t i = 0; i < staged->staged.size(); ++i) {
      const auto& s = staged->staged[i];
      if (s.cache == proto::CacheOutcome::absent) {
        ask.absent.push_back(i);
        continue;
      }
      std::string note = s.note;
      if (i < ask.notes.size() && !ask.notes[i].empty() && s.cache != proto::CacheOutcome::hit) {
        note = ask.notes[i] + (note.empty() ? "" : ", " + note);
      }
      std::printf("stagehand: %s: %s\n", a.node.c_str(),
                  stage::summary_line(s.how, s.shown, a.tmpdir, s.dest, s.files, s.bytes, s.seconds,
                                      proto::outcome_name(s.cache), note)
                    .c_str());
    }
    std::fflush(stdout);
    return DaemonOutcome::staged;
  }
  // Whatever a daemon that died midway left must go before staging here: only paths that did not
  // exist before it was asked, never a directory the job made.
  for (const auto& made : missing_before) {
    const auto slash = made.rfind('/');
    auto parent = fs::open_beneath(root_fd, slash == std::string::npos ? "" : made.substr(0, slash), O_RDONLY | O_DIRECTORY);
    if (parent) {
      (void)fs::remove_tree(parent->get(), slash == std::string::npos ? made : made.substr(slash + 1));
    }
  }
  std::printf("stagehand: %s: the node daemon could not stage (%s); staging without the cache\n", a.node.c_str(),
              why.c_str());
  std::fflush(stdout);
  if (listening) {
    failure = std::move(why); // busy, stuck, refused: each summary says why too
  }
  return DaemonOutcome::unavailable;
}

int stage_run_checked(const std::vector<std::string>& args)
{
  auto request = stage::parse_request_args(args);
  if (!request) {
    std::fprintf(stderr, "stagehand: stage-run: %s\n%s\n", request.error().message.c_str(), stage::k_stage_run_usage);
    return 2;
  }
  const stage::StageRequest& a = *request;
  StageConfig config;
  config.max_bytes = a.max_bytes;
  config.allowed_roots = a.allowed_roots;
  std::string base = a.base;
  if (base.empty()) {
    char cwd[4096];
    base = ::getcwd(cwd, sizeof cwd) ? cwd : "/";
  }

  UniqueFd root(::open(a.tmpdir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!root.valid()) {
    std::fprintf(stderr, "stagehand: --stage-data: no scratch directory %s on node %s\n", a.tmpdir.c_str(),
                 a.node.c_str());
    return 1;
  }
  if (::mkdirat(root.get(), stage::k_state_dir, 0700) != 0 && errno != EEXIST) {
    std::perror("stagehand: --stage-data: .stagehand");
    return 1;
  }
  UniqueFd state(::openat(root.get(), stage::k_state_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  UniqueFd lock(state.valid() ? ::openat(state.get(), stage::k_lock_name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600)
                              : -1);
  if (!lock.valid() || ::flock(lock.get(), LOCK_EX) != 0) {
    std::perror("stagehand: --stage-data: lock");
    return 1;
  }
  // Another task of this job on this node got here first: reuse its result.
  const std::string done = stage::done_marker(a.specs);
  const std::string failed_name = stage::failed_marker(a.specs);
  if (::faccessat(state.get(), done.c_str(), F_OK, 0) == 0) {
    return 0;
  }
  if (UniqueFd failed(::openat(state.get(), failed_name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC)); failed.valid()) {
    auto line = fs::read_all(failed.get(), failed_name);
    std::fprintf(stderr, "%s", line ? line->c_str() : "stagehand: --stage-data: staging failed earlier on this node\n");
    return 1;
  }

  auto fail = [&](const std::string& message) {
    std::string line = "stagehand: " + message + " (node " + a.node + ")\n";
    std::fputs(line.c_str(), stderr);
    write_marker(state.get(), failed_name, line);
    return 1;
  };
  auto specs = stage::parse_stage_option(a.specs);
  if (!specs) {
    return fail(specs.error().message);
  }
  auto is_archive = [](int fd) {
    auto kind = archive::probe_archive(fd);
    return kind && *kind == archive::ArchiveKind::archive;
  };
  const bool daemon = !a.socket.empty() && a.job_id != 0;
  // The content decides here, as the user, whether a file unpacks and so what its default
  // destination is called (the daemon reads the same content with the same formats).
  auto sources = stage::check_sources(*specs, base, config, is_archive);
  if (!sources) {
    return fail(sources.error().message);
  }
  // Hits root showed as views (task_init_privileged): the job's files already, nothing to stage.
  // `todo` marks the rest (by index: a broadcast's copies are named by the source's index).
  std::vector<bool> todo(sources->size(), true);
  if (!a.views.empty()) {
    std::vector<tmpdir::View> views;
    for (const auto& line : a.views) {
      if (auto v = tmpdir::parse_view_line(line)) {
        views.push_back(*v);
      }
    }
    for (std::size_t i = 0; i < sources->size(); ++i) {
      const auto& s = (*sources)[i];
      auto v = std::find_if(views.begin(), views.end(), [&](const tmpdir::View& x) { return x.dest == s.dest; });
      if (v == views.end()) {
        continue;
      }
      todo[i] = false;
      std::printf("stagehand: %s: %s\n", a.node.c_str(),
                  stage::summary_line(v->how, s.shown, a.tmpdir, s.dest, v->files, v->bytes, 0, "cache hit",
                                      "shown as your own files (cache view)")
                    .c_str());
    }
    std::fflush(stdout);
  }
  for (std::size_t i = 0; i < sources->size(); ++i) {
    struct stat st {};
    if (todo[i] && ::fstatat(root.get(), (*sources)[i].dest.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
      return fail("--stage-data: " + (*sources)[i].shown + ": $SLURM_TMPDIR/" + (*sources)[i].dest +
                  " already exists: refused (staging never replaces what the job made)");
    }
  }
  auto pick = [&](const std::vector<stage::CheckedSource>& from) {
    std::vector<stage::CheckedSource> out;
    for (std::size_t i = 0; i < from.size(); ++i) {
      if (todo[i]) {
        out.push_back(from[i]);
      }
    }
    return out;
  };
  std::string without_daemon; // why the node daemon did not stage, for each summary line
  bool through_daemon = false;
  // A multi-node job with a node daemon: the daemon stages its hits (and directories) and reports
  // the file sources it would read; those are broadcast (read once for the job) and the daemon
  // then stages them from the delivered copies, filling its cache from them.
  const bool broadcasts = a.bcast != stage::BcastRole::none &&
                          std::any_of(sources->begin(), sources->end(), [](const auto& s) { return s.kind == stage::SourceKind::file; });
  if (daemon && std::find(todo.begin(), todo.end(), true) != todo.end()) {
    std::string failure;
    DaemonAsk ask;
    ask.misses = broadcasts ? proto::Misses::report : proto::Misses::read;
    const auto first = pick(*sources);
    switch (stage_via_daemon(a, first, root.get(), ask, failure)) {
    case DaemonOutcome::staged: {
      through_daemon = true;
      std::vector<bool> left(sources->size(), false);
      std::size_t n = 0;
      for (std::size_t i = 0; i < sources->size(); ++i) {
        if (todo[i]) {
          left[i] = std::find(ask.absent.begin(), ask.absent.end(), n++) != ask.absent.end();
        }
      }
      todo = std::move(left);
      break;
    }
    case DaemonOutcome::failed:
      return fail(failure);
    case DaemonOutcome::unavailable:
      without_daemon = failure.size() > 160 ? failure.substr(0, 157) + "..." : failure;
      break;
    }
  }
  const bool nothing_left = std::find(todo.begin(), todo.end(), true) == todo.end();
  if (nothing_left && !(broadcasts && a.bcast == stage::BcastRole::reader)) {
    remove_delivery(a, root.get(), sources->size()); // a reader without a daemon may have sent one
    write_marker(state.get(), done, "");
    return 0;
  }
  stage::ProgressBoard board;
  std::optional<ProgressReporter> reporter;
  reporter.emplace(a.node, std::chrono::seconds(a.progress_interval), state.get(), board);
  // Multi-node jobs: file sources read once and delivered by Slurm's broadcast (broadcast.hpp). A
  // reader that needs nothing still tells the others so (they stop waiting).
  const Delivery delivery = take_part(a, root.get(), *sources, todo, &board);
  if (nothing_left) {
    reporter.reset();
    remove_delivery(a, root.get(), sources->size());
    write_marker(state.get(), done, "");
    return 0;
  }
  if (through_daemon) {
    reporter.reset(); // the daemon's progress frames take over
    std::string failure;
    DaemonAsk ask;
    for (std::size_t i = 0; i < sources->size(); ++i) {
      if (todo[i]) {
        ask.copies.push_back(delivery.copied[i] ? stage::bcast_copy_name(a.specs, i) : "");
        ask.notes.push_back(delivery.copied[i] ? delivery.note : "");
      }
    }
    switch (stage_via_daemon(a, pick(*sources), root.get(), ask, failure)) {
    case DaemonOutcome::staged:
      remove_delivery(a, root.get(), sources->size());
      write_marker(state.get(), done, "");
      return 0;
    case DaemonOutcome::failed:
      remove_delivery(a, root.get(), sources->size());
      return fail(failure);
    case DaemonOutcome::unavailable:
      without_daemon = failure.size() > 160 ? failure.substr(0, 157) + "..." : failure;
      reporter.emplace(a.node, std::chrono::seconds(a.progress_interval), state.get(), board);
      break;
    }
  }
  stage::StageLimits limits;
  limits.max_bytes = config.max_bytes;
  limits.allowed_roots = config.allowed_roots;
  if (delivery.used && !limits.allowed_roots.empty()) {
    limits.allowed_roots.push_back(a.tmpdir); // the delivered copies; the sources were checked by the reader
  }
  limits.progress = &board;
  const auto rest = pick(delivery.sources);
  std::vector<bool> rest_copied;
  for (std::size_t i = 0; i < sources->size(); ++i) {
    if (todo[i]) {
      rest_copied.push_back(delivery.copied[i]);
    }
  }
  auto lines = stage::stage_all(rest, root.get(), a.tmpdir, limits);
  reporter.reset();
  remove_delivery(a, root.get(), sources->size());
  if (!lines) {
    return fail(lines.error().message);
  }
  for (std::size_t i = 0; i < lines->size(); ++i) {
    std::string line = (*lines)[i];
    const std::string tail = " (no cache)";
    if (i < rest_copied.size() && rest_copied[i] && line.ends_with(tail)) {
      line.insert(line.size() - tail.size(), ", " + delivery.note);
    }
    if (!without_daemon.empty() && line.ends_with(tail)) {
      // A summary that staged without the daemon says why (SPEC: never a silent fallback).
      line.insert(line.size() - tail.size(), ", not through the node daemon: " + without_daemon);
    }
    std::printf("stagehand: %s: %s\n", a.node.c_str(), line.c_str());
  }
  std::fflush(stdout);
  write_marker(state.get(), done, "");
  return 0;
}

} // namespace

int stage_run(const std::vector<std::string>& args)
{
  // No exception ends the helper: one line, and slurmstepd fails the task cleanly.
  try {
    return stage_run_checked(args);
  } catch (const std::bad_alloc&) {
    std::fputs("stagehand: --stage-data: out of memory on this node\n", stderr);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "stagehand: --stage-data: internal error: %s\n", e.what());
  }
  return 1;
}

} // namespace stagehand::cli
