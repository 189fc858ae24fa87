// stage-run: check the specs again (as the user), then stage exactly once per node per job. Tasks
// on the node serialise on a lock in $SLURM_TMPDIR/.stagehand; the first stages, the others (and
// later steps) find its result there. With a node daemon, it stages through the daemon's cache;
// when the daemon cannot (not running, crashed, busy, cannot see the source), it stages in this
// process.
#include "stage_run.hpp"

#include "broadcast.hpp"
#include "progress_reporter.hpp"

#include "stagehand/fs/atomic_file.hpp"
#include "stagehand/fs/io.hpp"
#include "stagehand/fs/remove_tree.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/ipc/client.hpp"
#include "stagehand/tmpdir/views.hpp"
#include "stagehand/archive/extract.hpp"
#include "stagehand/stage/reach.hpp"
#include "stagehand/stage/request.hpp"
#include "stagehand/stage/run.hpp"
#include "stagehand/stage/spec.hpp"
#include "stagehand/stage/state_dir.hpp"
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

enum class DaemonOutcome { staged, failed, unavailable };

// What a request to the daemon asks besides the sources: per source, the broadcast's delivered
// copy to read in its place ("" = the source) and a note for its summary; and whether misses
// are read or only reported (`absent` then lists them, by index in the sources given).
struct DaemonAsk
{
  proto::Misses misses = proto::Misses::read;
  std::vector<std::string> copies;
  std::vector<std::string> copy_ids; // per copy: the identity of the file the broadcast read
  std::vector<std::string> notes;
  std::vector<std::size_t> absent;
};

// The outermost path of each destination that does not exist yet: all that a daemon which dies
// midway may leave behind.
std::vector<std::string> missing_dests(int root_fd, const std::vector<stage::CheckedSource>& sources)
{
  std::vector<std::string> missing;
  for (const auto& s : sources) {
    if (auto m = stage::outermost_missing(root_fd, s.dest); !m.empty()) {
      missing.push_back(std::move(m));
    }
  }
  return missing;
}

proto::Stage stage_request(const stage::StageRequest& a, const std::vector<stage::CheckedSource>& sources,
                           const DaemonAsk& ask)
{
  proto::Stage req;
  req.job_id = a.job_id;
  req.max_bytes = a.max_bytes;
  req.misses = ask.misses;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const auto& s = sources[i];
    req.sources.push_back(proto::SourceSpec{s.shown, s.path, s.dest,
                                            s.kind, s.mode,
                                            i < ask.copies.size() ? ask.copies[i] : "",
                                            i < ask.copy_ids.size() ? ask.copy_ids[i] : ""});
  }
  return req;
}

// Sends `req` to the daemon and waits for its reply, printing its progress every progress interval.
Result<proto::ReplyFrame> call_daemon(const stage::StageRequest& a, const proto::Stage& req)
{
  ipc::CallOptions options;
  options.connect_deadline = std::chrono::milliseconds(2000);
  options.idle_deadline = std::chrono::milliseconds(60000); // the daemon sends a frame every few seconds
  const auto t0 = std::chrono::steady_clock::now();
  const std::chrono::seconds interval(a.progress_interval);
  auto next_progress = t0 + interval;
  return ipc::call(a.socket, req, options, [&](const proto::Progress& p) {
    if (interval.count() > 0 && std::chrono::steady_clock::now() >= next_progress) {
      print_progress(a.node, p);
      next_progress = std::chrono::steady_clock::now() + interval;
    }
  });
}

// One summary line per source the daemon staged; those it only reported go to `ask.absent`.
void print_daemon_summaries(const stage::StageRequest& a, const proto::StageReply& staged, DaemonAsk& ask)
{
  for (std::size_t i = 0; i < staged.staged.size(); ++i) {
    const auto& s = staged.staged[i];
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
}

// Why a stage reply does not answer the request it is for (a daemon's fault, or one older or
// newer than this helper), or "": one staged source for each asked, in order, to its destination.
std::string reply_mismatch(const std::vector<stage::CheckedSource>& sources, const proto::StageReply& staged)
{
  if (staged.staged.size() != sources.size()) {
    return "the node daemon answered for " + std::to_string(staged.staged.size()) + " sources, not the " +
           std::to_string(sources.size()) + " asked";
  }
  for (std::size_t i = 0; i < sources.size(); ++i) {
    if (staged.staged[i].dest != sources[i].dest) {
      return "the node daemon answered " + staged.staged[i].dest + " for " + sources[i].shown;
    }
  }
  return "";
}

// Whatever a daemon that died midway left must go before staging here: only paths that did not
// exist before it was asked (`missing_before`), never a directory the job made.
void remove_left_behind(int root_fd, const std::vector<std::string>& missing_before)
{
  for (const auto& made : missing_before) {
    const auto slash = made.rfind('/');
    auto parent =
      fs::open_beneath(root_fd, slash == std::string::npos ? "" : made.substr(0, slash), O_RDONLY | O_DIRECTORY);
    if (parent) {
      (void)fs::remove_tree(parent->get(), slash == std::string::npos ? made : made.substr(slash + 1));
    }
  }
}

// The line before a staging without the daemon that a daemon was asked for.
void say_without_daemon(const stage::StageRequest& a, const std::string& why)
{
  std::printf("stagehand: %s: the node daemon could not stage (%s); staging without the cache\n", a.node.c_str(),
              why.c_str());
  std::fflush(stdout);
}

// Stages through the daemon. `unavailable` means: stage in-process instead (a line said why, and
// `failure` holds it for the summary lines when a daemon was there: busy, stuck, refused).
DaemonOutcome stage_via_daemon(const stage::StageRequest& a, const std::vector<stage::CheckedSource>& sources,
                               int root_fd, DaemonAsk& ask, std::string& failure)
{
  const std::vector<std::string> missing_before = missing_dests(root_fd, sources);
  auto reply = call_daemon(a, stage_request(a, sources, ask));
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
  } else if (why = reply_mismatch(sources, *staged); why.empty()) {
    print_daemon_summaries(a, *staged, ask);
    return DaemonOutcome::staged;
  }
  remove_left_behind(root_fd, missing_before);
  say_without_daemon(a, why);
  if (listening) {
    failure = std::move(why); // busy, stuck, refused: each summary says why too
  }
  return DaemonOutcome::unavailable;
}

// Why the daemon did not stage, cut to fit in a summary line.
std::string shortened(const std::string& failure)
{
  return failure.size() > 160 ? failure.substr(0, 157) + "..." : failure;
}

bool is_archive(int fd)
{
  auto kind = archive::probe_archive(fd);
  return kind && *kind == archive::ArchiveKind::archive;
}

// The directory relative sources resolve against: --base, else this process's working directory.
std::string base_dir(const stage::StageRequest& a)
{
  std::string base = a.base;
  if (base.empty()) {
    char cwd[4096];
    base = ::getcwd(cwd, sizeof cwd) ? cwd : "/";
  }
  return base;
}

// The job's directory on this node, its .stagehand directory and the lock the job's tasks on the
// node serialise on (held while it lives); nullopt, after a line saying why, when it cannot.
std::optional<stage::LockedStateDir> lock_job_dir(const stage::StageRequest& a)
{
  auto locked = stage::lock_state_dir(a.tmpdir);
  if (!locked) {
    std::fprintf(stderr, "stagehand: --stage-data: %s on node %s\n", locked.error().message.c_str(), a.node.c_str());
    return std::nullopt;
  }
  return std::move(*locked);
}

// The staging of these specs on this node, under the lock: the sources checked, then staged
// through the node daemon, a broadcast, or in this process. A step that can end the run returns
// its exit code, or nullopt when the run goes on.
struct NodeStaging
{
  const stage::StageRequest& a;
  int root_fd;
  int state_fd;
  std::string done;        // the marker that says these specs were staged on this node
  std::string failed_name; // the marker that holds why they failed on this node
  StageConfig config;
  std::vector<stage::CheckedSource> sources;
  // Per source: still to stage (by index: a broadcast's copies are named by the source's index).
  std::vector<bool> todo;
  std::string without_daemon; // why the node daemon did not stage, for each summary line
  bool through_daemon = false;
  bool broadcasts = false;
  bool told = true; // as a reader: its scope's nodes heard from it (Delivery::told)

  NodeStaging(const stage::StageRequest& request, const stage::LockedStateDir& dir)
    : a(request), root_fd(dir.root.get()), state_fd(dir.state.get()), done(stage::done_marker(request.specs)),
      failed_name(stage::failed_marker(request.specs))
  {
    config.max_bytes = a.max_bytes;
    config.allowed_roots = a.allowed_roots;
  }

  // Another task of this job on this node got here first: its result (its line again when it
  // failed), or nullopt when none did.
  std::optional<int> earlier_outcome() const
  {
    if (stage::has_marker(state_fd, done)) {
      return 0;
    }
    if (UniqueFd failed(::openat(state_fd, failed_name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC)); failed.valid()) {
      auto line = fs::read_all(failed.get(), failed_name);
      std::fprintf(stderr, "%s",
                   line ? line->c_str() : "stagehand: --stage-data: staging failed earlier on this node\n");
      return 1;
    }
    return std::nullopt;
  }

  // One line to the job's output, kept in the failed marker for the job's other tasks.
  int fail(const std::string& message) const
  {
    std::string line = "stagehand: " + message + " (node " + a.node + ")\n";
    std::fputs(line.c_str(), stderr);
    stage::write_marker(state_fd, failed_name, line);
    return 1;
  }

  int succeed() const
  {
    // Whom it reached (reach.hpp): the scope's nodes, or this one alone when the reader could not
    // tell them (they may still wait for it).
    const std::string reached = a.bcast == stage::BcastRole::none ? "" : told ? a.bcast_nodes : a.node;
    stage::write_marker(state_fd, done, stage::reach_text(broadcasts, reached));
    return 0;
  }

  // These specs were staged here before (or failed): a broadcast a later step's reader sent this
  // node is of no use and goes; and when this node is the step's reader and its earlier staging
  // did not reach every node of the step that could wait for it, it tells them at once that nothing
  // is sent (the ones that still stage read the sources themselves) and notes that they were reached.
  void settle_earlier(bool staged) const
  {
    if (auto specs = stage::parse_stage_option(a.specs)) {
      remove_delivery(a, root_fd, specs->size());
    }
    if (a.bcast != stage::BcastRole::reader) {
      return;
    }
    if (!staged) {
      (void)tell_step(a, root_fd, Told::failed);
      return;
    }
    const std::string text = fs::read_small_file(state_fd, done, 1024 * 1024).value_or("");
    if (stage::has_files(text) && !a.bcast_nodes.empty() && !stage::reached(text, a.bcast_nodes) &&
        tell_step(a, root_fd, Told::nothing_sent)) {
      stage::write_marker(state_fd, done, stage::with_reached(text, a.bcast_nodes));
    }
  }

  bool anything_todo() const { return std::find(todo.begin(), todo.end(), true) != todo.end(); }

  // The elements of `from` (one per source) whose source is still to stage, or that `which` marks.
  template<typename T>
  std::vector<T> pick(const std::vector<T>& from, const std::vector<bool>* which = nullptr) const
  {
    const auto& mask = which ? *which : todo;
    std::vector<T> out;
    for (std::size_t i = 0; i < from.size(); ++i) {
      if (mask[i]) {
        out.push_back(from[i]);
      }
    }
    return out;
  }

  // Hits root showed as views (task_init_privileged): the job's files already, nothing to stage.
  void show_views()
  {
    if (a.views.empty()) {
      return;
    }
    std::vector<tmpdir::View> views;
    for (const auto& line : a.views) {
      if (auto v = tmpdir::parse_view_line(line)) {
        views.push_back(*v);
      }
    }
    for (std::size_t i = 0; i < sources.size(); ++i) {
      const auto& s = sources[i];
      auto v = std::find_if(views.begin(), views.end(), [&](const tmpdir::View& x) { return x.dest == s.dest; });
      if (v == views.end()) {
        continue;
      }
      todo[i] = false;
      std::printf("stagehand: %s: %s\n", a.node.c_str(), tmpdir::view_summary(*v, s.shown, a.tmpdir).c_str());
    }
    std::fflush(stdout);
  }

  // The first source still to stage whose destination exists already, or null.
  const stage::CheckedSource* existing_dest() const
  {
    for (std::size_t i = 0; i < sources.size(); ++i) {
      struct stat st {};
      if (todo[i] && ::fstatat(root_fd, sources[i].dest.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
        return &sources[i];
      }
    }
    return nullptr;
  }

  // The daemon staged the sources `asked` marks but those it reported absent (`absent` indexes the
  // sources it was given): these, and what was not asked, remain.
  void keep_absent(const std::vector<std::size_t>& absent, const std::vector<bool>& asked)
  {
    std::vector<bool> left = todo;
    std::size_t n = 0;
    for (std::size_t i = 0; i < sources.size(); ++i) {
      if (asked[i]) {
        left[i] = std::find(absent.begin(), absent.end(), n++) != absent.end();
      }
    }
    todo = std::move(left);
  }

  // The daemon's first pass: everything it can, or with a broadcast coming, all but the file
  // sources it would read (it reports those, and they stay to do). The step's reader asks for its
  // file sources alone: its broadcast starts as soon as they are known, not after directories
  // (read on every node, in its second pass) or another step's staging, which the step's other
  // nodes would wait for, and give up on after 30 s.
  std::optional<int> stage_first_through_daemon()
  {
    std::string failure;
    DaemonAsk ask;
    ask.misses = broadcasts ? proto::Misses::report : proto::Misses::read;
    std::vector<bool> asked = todo;
    if (broadcasts && a.bcast == stage::BcastRole::reader) {
      for (std::size_t i = 0; i < sources.size(); ++i) {
        asked[i] = asked[i] && sources[i].kind == stage::SourceKind::file;
      }
    }
    if (std::find(asked.begin(), asked.end(), true) == asked.end()) {
      through_daemon = true; // (nothing to ask first: the second pass asks for the rest)
      return std::nullopt;
    }
    switch (stage_via_daemon(a, pick(sources, &asked), root_fd, ask, failure)) {
    case DaemonOutcome::staged:
      through_daemon = true;
      keep_absent(ask.absent, asked);
      break;
    case DaemonOutcome::failed:
      return fail(failure);
    case DaemonOutcome::unavailable:
      without_daemon = shortened(failure);
      break;
    }
    return std::nullopt;
  }

  // The daemon's second pass, after a broadcast: the rest, read from the delivered copies where
  // there are some (filling its cache from them).
  std::optional<int> stage_delivered_through_daemon(const Delivery& delivery)
  {
    std::string failure;
    DaemonAsk ask;
    for (std::size_t i = 0; i < sources.size(); ++i) {
      if (todo[i]) {
        ask.copies.push_back(delivery.copied[i] ? stage::bcast_copy_name(a.specs, i) : "");
        ask.copy_ids.push_back(delivery.copied[i] ? delivery.identities[i] : "");
        ask.notes.push_back(delivery.copied[i] ? delivery.note : "");
      }
    }
    switch (stage_via_daemon(a, pick(sources), root_fd, ask, failure)) {
    case DaemonOutcome::staged:
      remove_delivery(a, root_fd, sources.size());
      return succeed();
    case DaemonOutcome::failed:
      remove_delivery(a, root_fd, sources.size());
      return fail(failure);
    case DaemonOutcome::unavailable:
      without_daemon = shortened(failure);
      break;
    }
    return std::nullopt;
  }

  // The summary lines of what this process staged; `copied`: per line, whether it read a
  // delivered copy.
  void print_summaries(const std::vector<std::string>& lines, const std::vector<bool>& copied,
                       const std::string& note) const
  {
    for (std::size_t i = 0; i < lines.size(); ++i) {
      std::string line = lines[i];
      const std::string tail = " (no cache)";
      if (i < copied.size() && copied[i] && line.ends_with(tail)) {
        line.insert(line.size() - tail.size(), ", " + note);
      }
      if (!without_daemon.empty() && line.ends_with(tail)) {
        // A summary that staged without the daemon says why (SPEC: never a silent fallback).
        line.insert(line.size() - tail.size(), ", not through the node daemon: " + without_daemon);
      }
      std::printf("stagehand: %s: %s\n", a.node.c_str(), line.c_str());
    }
    std::fflush(stdout);
  }

  // Stages the rest in this process, from the delivered copies where there are some.
  int stage_here(const Delivery& delivery, stage::ProgressBoard& board, std::optional<ProgressReporter>& reporter)
  {
    stage::StageLimits limits;
    limits.max_bytes = config.max_bytes;
    limits.allowed_roots = config.allowed_roots;
    if (delivery.used && !limits.allowed_roots.empty()) {
      limits.allowed_roots.push_back(a.tmpdir); // the delivered copies; the sources were checked by the reader
    }
    limits.progress = &board;
    const auto rest = pick(delivery.sources);
    const std::vector<bool> rest_copied = pick(delivery.copied);
    auto lines = stage::stage_all(rest, root_fd, a.tmpdir, limits);
    reporter.reset();
    remove_delivery(a, root_fd, sources.size());
    if (!lines) {
      return fail(lines.error().message);
    }
    print_summaries(*lines, rest_copied, delivery.note);
    return succeed();
  }

  // What the daemon left (everything without one): this node's part in a broadcast, then the
  // daemon's second pass or staging in this process.
  int stage_rest()
  {
    const bool nothing_left = !anything_todo();
    if (nothing_left && !(broadcasts && a.bcast == stage::BcastRole::reader)) {
      remove_delivery(a, root_fd, sources.size()); // a reader without a daemon may have sent one
      return succeed();
    }
    stage::ProgressBoard board;
    std::optional<ProgressReporter> reporter;
    reporter.emplace(a.node, std::chrono::seconds(a.progress_interval), state_fd, board);
    // Multi-node jobs: file sources read once and delivered by Slurm's broadcast (broadcast.hpp). A
    // reader that needs nothing still tells the others so (they stop waiting).
    const Delivery delivery = take_part(a, root_fd, sources, todo, &board);
    told = delivery.told;
    if (nothing_left) {
      reporter.reset();
      remove_delivery(a, root_fd, sources.size());
      return succeed();
    }
    if (through_daemon) {
      reporter.reset(); // the daemon's progress frames take over
      if (auto rc = stage_delivered_through_daemon(delivery)) {
        return *rc;
      }
      reporter.emplace(a.node, std::chrono::seconds(a.progress_interval), state_fd, board);
    }
    return stage_here(delivery, board, reporter);
  }

  // Checks the specs and sources (as the user) and stages them.
  int run(const std::string& base)
  {
    auto specs = stage::parse_stage_option(a.specs);
    if (!specs) {
      return fail(specs.error().message);
    }
    const bool daemon = !a.socket.empty() && a.job_id != 0;
    // The content decides here, as the user, whether a file unpacks and so what its default
    // destination is called (the daemon reads the same content with the same formats).
    auto checked = stage::check_sources(*specs, base, config, is_archive);
    if (!checked) {
      return fail(checked.error().message);
    }
    sources = std::move(*checked);
    todo.assign(sources.size(), true);
    show_views();
    if (const auto* s = existing_dest()) {
      return fail("--stage-data: " + s->shown + ": $SLURM_TMPDIR/" + s->dest +
                  " already exists: refused (staging never replaces what the job made)");
    }
    // A multi-node job with a node daemon: the daemon stages its hits (and directories) and reports
    // the file sources it would read; those are broadcast (read once for the job) and the daemon
    // then stages them from the delivered copies, filling its cache from them.
    broadcasts = a.bcast != stage::BcastRole::none && std::any_of(sources.begin(), sources.end(), [](const auto& s) {
                   return s.kind == stage::SourceKind::file;
                 });
    if (daemon && anything_todo()) {
      if (!a.daemon_silent.empty()) { // it kept the task start waiting its deadline: not waited for again
        say_without_daemon(a, a.daemon_silent);
        without_daemon = shortened(a.daemon_silent);
      } else if (auto rc = stage_first_through_daemon()) {
        return *rc;
      }
    }
    return stage_rest();
  }
};

int stage_run_checked(const std::vector<std::string>& args)
{
  auto request = stage::parse_request_args(args);
  if (!request) {
    std::fprintf(stderr, "stagehand: stage-run: %s\n%s\n", request.error().message.c_str(), stage::k_stage_run_usage);
    return 2;
  }
  const std::string base = base_dir(*request);
  // Staged here before: only what that staging owes this step (reach.hpp), under a lock of its
  // own, never behind another step's staging of other sources (which holds the job's lock).
  const std::string done = request->tmpdir + "/" + stage::k_state_dir + "/" + stage::done_marker(request->specs);
  if (::access(done.c_str(), F_OK) == 0) {
    if (auto settling = stage::lock_state_dir(request->tmpdir, stage::settle_lock_name(request->specs))) {
      NodeStaging(*request, *settling).settle_earlier(true);
      return 0;
    }
  }
  const auto dir = lock_job_dir(*request);
  if (!dir) {
    return 1;
  }
  NodeStaging staging(*request, *dir);
  if (auto rc = staging.earlier_outcome()) {
    // (the settle lock too, as on the way above: one task at a time tells and records)
    if (auto settling = stage::lock_in(dir->state.get(), stage::settle_lock_name(request->specs))) {
      staging.settle_earlier(*rc == 0);
    }
    return *rc;
  }
  return staging.run(base);
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
