// Read-once fan-out with sbcast: reader, receivers, and cleanup.
#include "broadcast.hpp"

#include "stagehand/fs/atomic_file.hpp"
#include "stagehand/fs/io.hpp"
#include "stagehand/stage/bcast_marker.hpp"
#include "stagehand/stage/copy.hpp"
#include "stagehand/stage/source.hpp"
#include "stagehand/util/fd.hpp"
#include "stagehand/util/subprocess.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <chrono>
#include <cstdio>
#include <thread>

namespace stagehand::cli {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto k_first_sign = std::chrono::seconds(30); // the reader starts within this
constexpr auto k_stalled = std::chrono::seconds(120);   // a delivery that stops growing this long is given up
constexpr auto k_poll = std::chrono::milliseconds(200);

void say(const stage::StageRequest& a, const std::string& line)
{
  std::printf("stagehand: %s: %s\n", a.node.c_str(), line.c_str());
  std::fflush(stdout);
}

bool exists(int root_fd, const std::string& name)
{
  struct stat st {};
  return ::fstatat(root_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

// Runs `sbcast ARGS...` (found in the task's PATH) with `keep_fd` inherited; its last line of
// output on failure. Without a bound while it sends (it takes as long as the data), then 30 s to end.
Status run_sbcast(const std::vector<std::string>& args, int keep_fd)
{
  proc::Program sbcast;
  sbcast.argv = {"sbcast"};
  sbcast.argv.insert(sbcast.argv.end(), args.begin(), args.end());
  sbcast.err = proc::Output::capture;
  sbcast.keep_fd = keep_fd; // the source, as /dev/fd/N
  sbcast.max_output = 64 * 1024;
  sbcast.exit_grace = std::chrono::seconds(30);
  auto ended = proc::run(sbcast, std::nullopt);
  if (!ended) {
    return Error::io(ended.error().message, ended.error().code);
  }
  if (ended->succeeded()) {
    return ok_status();
  }
  std::string text = ended->output;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) {
    text.pop_back();
  }
  const auto nl = text.rfind('\n');
  std::string last = nl == std::string::npos ? text : text.substr(nl + 1);
  return Error::io(last.empty() ? ended->describe() : last, EIO);
}

// Broadcasts a small marker file named `name` (written in the state directory first): the
// reader's node, and for "done" the sources it sent with the identity of each (bcast_marker.hpp).
Status broadcast_marker(const stage::StageRequest& a, int root_fd, const std::string& name,
                        const std::map<std::size_t, stage::SentIdentity>& sent = {})
{
  // Its own name: another step's staging of other specs may send a marker at the same time.
  const std::string local = std::string(stage::k_state_dir) + "/bcast-marker." + name.substr(name.rfind('-') + 1) +
                            "." + std::to_string(::getpid());
  UniqueFd fd(::openat(root_fd, local.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd.valid()) {
    return Error::from_errno(local);
  }
  if (auto st = fs::write_all(fd.get(), stage::done_text(a.node, sent), local); !st) {
    return st.error();
  }
  auto r = run_sbcast({"-f", "-j", a.bcast_scope, a.tmpdir + "/" + local, a.tmpdir + "/" + name}, -1);
  (void)::unlinkat(root_fd, local.c_str(), 0);
  return r;
}

// sbcast maps its source (mmap): NFS and Lustre allow it, a FUSE mount without a page cache (such
// as the test's sharedfs) does not.
bool mappable(int fd)
{
  void* p = ::mmap(nullptr, 1, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    return false;
  }
  ::munmap(p, 1);
  return true;
}

// What sbcast reads for a source open at `fd`: /dev/fd/N, the very file checked; or, when it
// cannot be mapped, a node-local copy in the state directory (read once all the same) that
// `local` names for removal.
Result<std::string> sbcast_input(const stage::StageRequest& a, int root_fd, int fd, std::uint64_t size,
                                 std::size_t index, const std::string& shown, std::string& local,
                                 stage::ProgressBoard* board)
{
  if (mappable(fd)) {
    return "/dev/fd/" + std::to_string(fd);
  }
  local = std::string(stage::k_state_dir) + "/bcast-src-" + std::to_string(index);
  (void)::unlinkat(root_fd, local.c_str(), 0);
  UniqueFd out(::openat(root_fd, local.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!out.valid()) {
    return Error::from_errno(local);
  }
  stage::CopyStats stats;
  const stage::ProgressScope progress(board, shown, fd, size);
  if (auto st = stage::copy_into(fd, out.get(), a.max_bytes, stats, shown); !st) {
    return st.error();
  }
  return a.tmpdir + "/" + local;
}

std::string seconds_since(Clock::time_point t0)
{
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", std::chrono::duration<double>(Clock::now() - t0).count());
  return buf;
}

std::uint64_t size_at(int root_fd, const std::string& name)
{
  struct stat st {};
  return ::fstatat(root_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
}

bool is_file(const stage::CheckedSource& s) { return s.kind == stage::SourceKind::file; }

// The sources with each wanted file source that has a delivered copy read from it: a copy the
// reader's "done" marker names, of the size it sent, while the source is still the file it read.
// A copy it names that cannot be used is read here, after a line saying why.
Delivery from_copies(const stage::StageRequest& a, int root_fd, const std::vector<stage::CheckedSource>& sources,
                     const std::vector<bool>& wanted, std::string note)
{
  Delivery d{sources, std::vector<bool>(sources.size(), false), std::vector<std::string>(sources.size()),
             std::move(note), false};
  const std::string text = fs::read_small_file(root_fd, stage::bcast_done_name(a.specs), 64 * 1024).value_or("");
  const auto sent = stage::sent_in(text);
  if (sent.empty() && text.find("\nsent ") != std::string::npos) {
    say(a, "--stage-data: the broadcast's marker comes from an older stagehand on the step's first node; reading the "
           "sources here");
  }
  for (const auto& [i, id] : sent) {
    if (i >= d.sources.size() || !wanted[i] || !is_file(d.sources[i])) {
      continue;
    }
    const std::string copy = stage::bcast_copy_name(a.specs, i);
    struct stat copy_st {};
    struct stat source_st {};
    std::string why;
    if (::fstatat(root_fd, copy.c_str(), &copy_st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(copy_st.st_mode)) {
      why = "the broadcast said done but the copy of " + d.sources[i].shown + " is missing on this node";
    } else if (static_cast<std::uint64_t>(copy_st.st_size) != id.size) {
      why = "the copy of " + d.sources[i].shown + " delivered to this node " +
            (static_cast<std::uint64_t>(copy_st.st_size) < id.size ? "is incomplete" : "is not what was broadcast");
    } else if (::fstatat(AT_FDCWD, d.sources[i].path.c_str(), &source_st, AT_SYMLINK_NOFOLLOW) != 0 ||
               !stage::same_source(id, stage::identity_of(source_st))) {
      why = d.sources[i].shown + " changed since it was broadcast";
    }
    if (!why.empty()) {
      say(a, "--stage-data: " + why + "; reading it here");
      continue;
    }
    d.sources[i].path = a.tmpdir + "/" + copy;
    d.copied[i] = true;
    d.identities[i] = stage::identity_text(id);
    d.used = true;
  }
  return d;
}

Delivery read_and_broadcast(const stage::StageRequest& a, int root_fd, const std::vector<stage::CheckedSource>& sources,
                            const std::vector<bool>& wanted, stage::ProgressBoard* board)
{
  const auto t0 = Clock::now();
  Delivery unchanged{sources, std::vector<bool>(sources.size(), false), {}, "", false};
  std::map<std::size_t, stage::SentIdentity> sent_ids;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const auto& s = sources[i];
    if (s.kind == stage::SourceKind::dir || !wanted[i]) {
      continue;
    }
    // Opened the one way every source is (no FIFO, no symlink, allowed_roots on what is open);
    // sbcast reads that very file through /dev/fd.
    auto in = stage::open_source(s.path, stage::SourceKind::file, a.allowed_roots);
    if (!in) {
      unchanged.told = bool(broadcast_marker(a, root_fd, stage::bcast_failed_name(a.specs))); // receivers stop waiting
      remove_delivery(a, root_fd, sources.size());
      return unchanged; // staging below says why, naming the source
    }
    std::string local;
    const auto size = static_cast<std::uint64_t>(in->st.st_size);
    auto input = sbcast_input(a, root_fd, in->fd.get(), size, i, s.shown, local, board);
    Status sent = Status(Error::internal("not sent"));
    if (input) {
      // This node receives its own copy too: its size is the broadcast's progress.
      const std::string copy = stage::bcast_copy_name(a.specs, i);
      const stage::ProgressScope progress(board, s.shown + " (broadcast)", [root_fd, copy] { return size_at(root_fd, copy); },
                                          size);
      sent = run_sbcast({"-f", "-j", a.bcast_scope, *input, a.tmpdir + "/" + copy}, in->fd.get());
    } else {
      sent = input.error();
    }
    if (!local.empty()) {
      (void)::unlinkat(root_fd, local.c_str(), 0);
    }
    if (!sent) {
      unchanged.told = bool(broadcast_marker(a, root_fd, stage::bcast_failed_name(a.specs))); // receivers stop waiting
      remove_delivery(a, root_fd, sources.size());
      say(a, "--stage-data: the broadcast of " + s.shown + " failed (sbcast: " + sent.error().message +
               "); every node reads the sources itself");
      return unchanged;
    }
    sent_ids[i] = stage::identity_of(in->st); // of the descriptor sbcast read
  }
  // Sent even when this node wanted none (its cache had them all): the others stop waiting.
  if (auto done = broadcast_marker(a, root_fd, stage::bcast_done_name(a.specs), sent_ids); !done) {
    unchanged.told = bool(broadcast_marker(a, root_fd, stage::bcast_failed_name(a.specs)));
    remove_delivery(a, root_fd, sources.size());
    if (!sent_ids.empty()) {
      say(a, "--stage-data: the broadcast could not be completed (sbcast: " + done.error().message +
               "); every node reads the sources itself");
    }
    return unchanged;
  }
  return from_copies(a, root_fd, sources, wanted, "read once, broadcast by sbcast in " + seconds_since(t0));
}

// Waits for the step's reader: its "done" or "failed" marker, with a deadline for the first sign
// of it and for a delivery that stops growing.
Delivery await_delivery(const stage::StageRequest& a, int root_fd, const std::vector<stage::CheckedSource>& sources,
                        const std::vector<bool>& wanted, stage::ProgressBoard* board)
{
  Delivery unchanged{sources, std::vector<bool>(sources.size(), false), {}, "", false};
  std::string shown;
  std::uint64_t total = 0;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const auto& s = sources[i];
    if (s.kind == stage::SourceKind::file && wanted[i]) {
      shown += (shown.empty() ? "" : ",") + s.shown;
      total += s.bytes;
    }
  }
  const stage::ProgressScope progress(board, shown + " (broadcast)", [&a, root_fd, n = sources.size()] {
    std::uint64_t done = 0;
    for (std::size_t i = 0; i < n; ++i) {
      done += size_at(root_fd, stage::bcast_copy_name(a.specs, i));
    }
    return done;
  }, total);
  const auto t0 = Clock::now();
  auto last_change = t0;
  std::uint64_t last_bytes = 0;
  bool seen = false;
  for (;;) {
    if (exists(root_fd, stage::bcast_done_name(a.specs))) {
      // What the reader did not send (its node had it cached) is read here.
      return from_copies(a, root_fd, sources, wanted, "from the broadcast (sbcast), waited " + seconds_since(t0));
    }
    if (exists(root_fd, stage::bcast_failed_name(a.specs))) {
      return unchanged; // the reader said why
    }
    if (exists(root_fd, stage::bcast_none_name(a.specs))) {
      return unchanged; // the reader staged these in an earlier step: it sends nothing
    }
    std::uint64_t bytes = 0;
    for (std::size_t i = 0; i < sources.size(); ++i) {
      struct stat st {};
      if (::fstatat(root_fd, stage::bcast_copy_name(a.specs, i).c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
        bytes += static_cast<std::uint64_t>(st.st_size);
        seen = true;
      }
    }
    const auto now = Clock::now();
    if (bytes != last_bytes) {
      last_bytes = bytes;
      last_change = now;
    }
    if ((!seen && now - t0 > k_first_sign) || (seen && now - last_change > k_stalled)) {
      say(a, "--stage-data: no broadcast arrived from the step's first node within " +
               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(seen ? k_stalled : k_first_sign).count()) +
               " s; reading the sources on this node");
      return unchanged;
    }
    std::this_thread::sleep_for(k_poll);
  }
}

} // namespace

Delivery take_part(const stage::StageRequest& a, int root_fd, const std::vector<stage::CheckedSource>& sources,
                   const std::vector<bool>& wanted, stage::ProgressBoard* board)
{
  Delivery unchanged{sources, std::vector<bool>(sources.size(), false), {}, "", false};
  bool files = false;
  bool wants_file = false;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    files = files || is_file(sources[i]);
    wants_file = wants_file || (is_file(sources[i]) && wanted[i]);
  }
  if (!files) {
    return unchanged; // directories only: every node reads them, nobody broadcasts or waits
  }
  const bool delivered = exists(root_fd, stage::bcast_done_name(a.specs));
  switch (a.bcast) {
  case stage::BcastRole::none:
    return unchanged;
  case stage::BcastRole::delivered:
    return delivered ? from_copies(a, root_fd, sources, wanted, "from the broadcast (sbcast)") : unchanged;
  case stage::BcastRole::reader:
    // An earlier reader (the batch step) delivered here already: use it.
    return delivered ? from_copies(a, root_fd, sources, wanted, "from the broadcast (sbcast)")
                     : read_and_broadcast(a, root_fd, sources, wanted, board);
  case stage::BcastRole::receiver:
    if (!wants_file) {
      return unchanged; // nothing to wait for
    }
    return delivered ? from_copies(a, root_fd, sources, wanted, "from the broadcast (sbcast)")
                     : await_delivery(a, root_fd, sources, wanted, board);
  }
  return unchanged;
}

bool tell_step(const stage::StageRequest& a, int root_fd, Told told)
{
  const std::string name =
    told == Told::nothing_sent ? stage::bcast_none_name(a.specs) : stage::bcast_failed_name(a.specs);
  if (a.bcast != stage::BcastRole::reader || !broadcast_marker(a, root_fd, name)) {
    return false; // the step's nodes then wait out their deadline, as when sbcast cannot run
  }
  (void)::unlinkat(root_fd, name.c_str(), 0); // this node's own copy of the marker
  return true;
}

void remove_delivery(const stage::StageRequest& a, int root_fd, std::size_t sources)
{
  for (const auto& name : stage::bcast_names(a.specs, sources)) {
    (void)::unlinkat(root_fd, name.c_str(), 0);
  }
}

} // namespace stagehand::cli
