// task_init_privileged (root, in each task's child before it becomes the job user, in the node's
// mount namespace): a --stage-data source that is a cache hit is shown in the job's directory as
// the job user's own files, O(1) (fs/overlay_view), instead of being linked file by file. Once per
// node per job (a lock and a record under root's `.views/job_<id>/`, tmpdir/views.hpp). Nothing here
// fails the task: any failure logs one line and the helper stages as without views.
#include "plugin.hpp"

#include "stagehand/ddp/hostlist.hpp"
#include "stagehand/fs/atomic_file.hpp"
#include "stagehand/fs/overlay_view.hpp"
#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/ipc/client.hpp"
#include "stagehand/stage/request.hpp"
#include "stagehand/stage/spec.hpp"
#include "stagehand/tmpdir/job_dir.hpp"
#include "stagehand/tmpdir/lifecycle.hpp"
#include "stagehand/tmpdir/views.hpp"
#include "stagehand/util/escape.hpp"

#include <slurm/slurm.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>

namespace stagehand::plugin {

namespace {

void say(const std::string& line) { slurm_info("stagehand: cache views: %s", escape_control(line).c_str()); }

// A directory of root's, 0700, made if missing (never through a symlink).
Result<UniqueFd> root_dir(int parent_fd, const std::string& name)
{
  if (::mkdirat(parent_fd, name.c_str(), 0700) != 0 && errno != EEXIST) {
    return Error::from_errno("cannot make " + name);
  }
  UniqueFd fd(::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  if (!fd.valid() || ::fstat(fd.get(), &st) != 0) {
    return Error::from_errno("cannot open " + name);
  }
  if (st.st_uid != 0 || (st.st_mode & 077) != 0) {
    return Error::refused(name + " is not root's alone (0700)");
  }
  return fd;
}

std::string boot_id()
{
  UniqueFd fd(::open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC));
  char buf[64] = {};
  const ssize_t n = fd.valid() ? ::read(fd.get(), buf, sizeof buf - 1) : -1;
  std::string id(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) {
    id.pop_back();
  }
  return id;
}

// Whether this node can show views, as this boot's probe found it, if one ran (root's
// `.views/probe`, on the scratch's filesystem; see probe_views).
std::optional<bool> probed_this_boot(int views_fd)
{
  const std::string boot = boot_id();
  if (auto kept = fs::read_small_file(views_fd, "probe", 4096); kept && kept->starts_with(boot + " ")) {
    return kept->substr(boot.size() + 1).starts_with("available");
  }
  return std::nullopt;
}

// Probes whether a view of `tree_fd` can be shown, and keeps the answer for this boot (a probe
// that fails is not kept: the next job probes again).
bool probe(int views_fd, int tree_fd, int scratch_fd)
{
  const std::string boot = boot_id();
  auto probed = fs::probe_overlay_view(tree_fd, scratch_fd);
  if (!probed) {
    say("probe failed: " + probed.error().message + "; staging without views");
    return false;
  }
  const bool ok = probed->availability == fs::Availability::available;
  if (!ok) {
    say(probed->reason + "; hits are linked as without views until the node restarts");
  }
  (void)fs::write_file_atomic(views_fd, "probe", boot + " " + (ok ? "available\n" : "unavailable " + probed->reason + "\n"),
                              0600, fs::Durability::none);
  return ok;
}

bool valid_key(const std::string& k)
{
  if (k.empty() || k.size() > 128) {
    return false;
  }
  for (char c : k) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}

struct Job
{
  std::uint32_t id = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// The sources a view may stand for (tmpdir::view_dest).
std::vector<proto::SourceSpec> candidates(const std::vector<stage::StageSpec>& specs)
{
  std::vector<proto::SourceSpec> out;
  for (const auto& s : specs) {
    auto dest = tmpdir::view_dest(s);
    if (!dest) {
      continue;
    }
    // Root never looks at the source (a user's hung filesystem would hold this task child in the
    // kernel): the daemon's side, as the job user, finds whether it is a file or a directory.
    out.push_back(proto::SourceSpec{s.src, s.src, *dest, stage::SourceKind::file, stage::Unpack::if_archive, ""});
  }
  return out;
}

// A new directory of root's (0700) for one view's upper and work: "view.N", the first N free (a
// job's later steps add views of their own beside the earlier ones').
Result<UniqueFd> fresh_scratch(int job_views_fd)
{
  for (unsigned n = 0; n < 100000; ++n) {
    const std::string name = "view." + std::to_string(n);
    if (::mkdirat(job_views_fd, name.c_str(), 0700) == 0) {
      return root_dir(job_views_fd, name);
    }
    if (errno != EEXIST) {
      return Error::from_errno("cannot make " + name);
    }
  }
  return Error::limit("too many views in one job");
}

// Mounts one view; false (and the mount point removed) when it cannot.
bool mount_view(const std::string& cache_dir, const Job& job, int job_fd, int job_views_fd, const std::string& key,
                const std::string& dest)
{
  auto cache = fs::open_trusted_dir(cache_dir, fs::CreateMissing::no);
  if (!cache) {
    say(cache.error().message);
    return false;
  }
  UniqueFd entries(::openat(cache->get(), "entries", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  UniqueFd entry(entries.valid() ? ::openat(entries.get(), key.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                                 : -1);
  UniqueFd data(entry.valid() ? ::openat(entry.get(), "data", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1);
  struct stat st {};
  if (!data.valid() || ::fstat(data.get(), &st) != 0) {
    if (errno != ENOTDIR) {
      say("cannot open cache entry " + key + ": " + std::strerror(errno));
    }
    return false; // a file's entry (ENOTDIR) is linked: a view is a directory
  }
  auto scratch = fresh_scratch(job_views_fd);
  if (!scratch) {
    say(scratch.error().message);
    return false;
  }
  if (::mkdirat(job_fd, dest.c_str(), 0700) != 0) {
    say("cannot make the mount point " + dest + ": " + std::strerror(errno));
    return false;
  }
  fs::OverlayViewRequest r;
  r.tree_fd = data.get();
  r.tree_uid = st.st_uid;
  r.tree_gid = st.st_gid;
  r.job_uid = job.uid;
  r.job_gid = job.gid;
  r.target_parent_fd = job_fd;
  r.target_name = dest;
  r.scratch_fd = scratch->get();
  if (auto mounted = fs::mount_overlay_view(r); !mounted) {
    say("job " + std::to_string(job.id) + ": " + dest + ": " + mounted.error().message + "; linked instead");
    (void)::unlinkat(job_fd, dest.c_str(), AT_REMOVEDIR);
    return false;
  }
  return true;
}

// Where views_for makes the views: the job's directory, and root's view directories (`.views/`
// and this job's, its lock held), with the name of the record for these specs.
struct ViewsPlace
{
  const Config& config;
  const Job& job;
  proto::ClaimedMisses claimed; // read_for_view where this job reads its sources on this node itself
  const std::string& node;
  int job_fd;
  int views_fd;
  int mine_fd;
  const std::string& record;
};

// Unmounts the views just made and removes their mount points: a view nobody recorded would meet
// the job's staging as a destination that exists already, and fail it.
void undo_views(const ViewsPlace& at, const tmpdir::ViewRecord& made)
{
  for (const auto& view : made.views) {
    if (auto st = fs::unmount_overlay_view(at.job_fd, view.dest); !st) {
      say("job " + std::to_string(at.job.id) + ": " + st.error().message);
      continue;
    }
    (void)::unlinkat(at.job_fd, view.dest.c_str(), AT_REMOVEDIR);
  }
}

// Records the views made (under the lock): what views_for returns. Views that cannot be recorded
// are undone: the task stages as without views.
Result<tmpdir::ViewRecord> write_record(const ViewsPlace& at, const tmpdir::ViewRecord& made)
{
  auto text = tmpdir::format_view_record(made);
  auto written = text ? fs::write_file_atomic(at.mine_fd, at.record, *text, 0600, fs::Durability::none)
                      : Status(text.error());
  if (!written) {
    undo_views(at, made);
    return written.error().with_context("cannot record the job's views");
  }
  return made;
}

// This boot's probe of whether views can be shown of cache_dir's entries (once per boot: the
// caller asked probed_this_boot first).
bool probe_views(const ViewsPlace& at, const std::string& cache_dir)
{
  auto cache = fs::open_trusted_dir(cache_dir, fs::CreateMissing::no);
  if (!cache) {
    say(cache.error().message);
    return false;
  }
  return probe(at.views_fd, cache->get(), at.mine_fd);
}

// The daemon's word on which of `sources` are cache hits, one entry each; nullopt when there is
// none to go by (said, unless no daemon runs here). A daemon that did not answer in time: why, in
// `silent` (the job's staging does not wait for it a second time).
std::optional<proto::CacheViewReply> ask_daemon(const ViewsPlace& at, const std::vector<proto::SourceSpec>& sources,
                                                std::string& silent)
{
  ipc::CallOptions options;
  options.connect_deadline = std::chrono::milliseconds(1000);
  options.idle_deadline = std::chrono::milliseconds(15000);
  const proto::CacheView ask{at.job.id, sources, at.claimed, at.config.stage.progress_interval};
  auto reply = ipc::call(expand_node(at.config.daemon.socket, at.node), ask, options);
  if (!reply || reply->error) {
    const std::string why = !reply ? reply.error().message : reply->error->message;
    if (!reply && (reply.error().code == ENOENT || reply.error().code == ECONNREFUSED)) {
      return std::nullopt; // no daemon here: nothing is cached
    }
    const char* what = reply                                ? "the node daemon could not look ("
                       : reply.error().code == EILSEQ ? "the node daemon was not asked ("
                                                      : "the node daemon did not answer (";
    say("job " + std::to_string(at.job.id) + ": " + what + why + "); no views");
    if (!reply && reply.error().code == ETIMEDOUT) {
      silent = why + " at task start";
    }
    return std::nullopt;
  }
  auto hits = proto::parse_cache_view_reply(reply->result_json);
  if (!hits || hits->entries.size() != sources.size()) {
    say("job " + std::to_string(at.job.id) + ": unreadable answer from the node daemon; no views");
    return std::nullopt;
  }
  return std::move(*hits);
}

// Mounts a view of each source of `specs` that is a cache hit, and records them.
Result<tmpdir::ViewRecord> make_views(const ViewsPlace& at, const std::string& specs)
{
  tmpdir::ViewRecord made;
  auto parsed = stage::parse_stage_option(specs);
  if (!parsed) {
    return write_record(at, made);
  }
  auto sources = candidates(*parsed);
  if (sources.empty()) {
    return write_record(at, made);
  }
  // Once per boot, the probe (on the cache's own filesystem) before anything is asked: a node
  // that cannot show views reads no miss for one. After it, the daemon first: the cache's disk is
  // touched only for a hit. One that stopped answering (an NFS or FUSE cache_dir) then holds this
  // task only if it stops between the daemon's answer and the mount; the daemon answers at once,
  // without the cache, once it has been out of reach 5 s.
  const std::string cache_dir = expand_node(at.config.daemon.cache_dir, at.node);
  const std::optional<bool> probed = probed_this_boot(at.views_fd);
  if (probed == false || (!probed && !probe_views(at, cache_dir))) {
    return write_record(at, made);
  }
  auto hits = ask_daemon(at, sources, made.daemon_silent);
  if (!hits || std::none_of(hits->entries.begin(), hits->entries.end(),
                            [](const proto::ViewEntry& e) { return valid_key(e.entry); })) {
    return write_record(at, made);
  }
  for (std::size_t i = 0; i < sources.size(); ++i) {
    const proto::ViewEntry& hit = hits->entries[i];
    const auto read_ms = static_cast<std::uint64_t>(hit.seconds * 1000.0 + 0.5);
    tmpdir::View view{sources[i].dest, hit.files, hit.bytes, hit.how,
                      hit.cache == proto::CacheOutcome::miss ? tmpdir::ViewOrigin::read : tmpdir::ViewOrigin::hit,
                      read_ms};
    if (valid_key(hit.entry) && view_line(view) &&
        mount_view(cache_dir, at.job, at.job_fd, at.mine_fd, hit.entry, view.dest)) {
      made.views.push_back(view);
    }
  }
  return write_record(at, made);
}

// The views of this job on this node for `specs`, made now or by an earlier task.
Result<tmpdir::ViewRecord> views_for(const Config& config, const Job& job, const std::string& node,
                                           const std::string& specs, proto::ClaimedMisses claimed)
{
  auto base = tmpdir::open_base(config, node);
  if (!base) {
    return base.error();
  }
  auto job_dir = fs::open_beneath(base->get(), tmpdir::job_dir_name(job.id), O_RDONLY | O_DIRECTORY);
  struct stat st {};
  if (!job_dir || ::fstat(job_dir->get(), &st) != 0 || st.st_uid != job.uid) {
    return Error::refused("no directory of the job's user for job " + std::to_string(job.id));
  }
  auto views = root_dir(base->get(), tmpdir::k_views_dir);
  if (!views) {
    return views.error();
  }
  auto mine = root_dir(views->get(), tmpdir::job_views_name(job.id));
  if (!mine) {
    return mine.error();
  }
  UniqueFd lock(::openat(mine->get(), "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!lock.valid() || ::flock(lock.get(), LOCK_EX) != 0) {
    return Error::from_errno("cannot lock the job's views");
  }
  const std::string record = "record" + stage::done_marker(specs);
  if (auto kept = fs::read_small_file(mine->get(), record, 1U << 20)) {
    return tmpdir::parse_view_record(*kept);
  }
  const ViewsPlace at{config, job, claimed, node, job_dir->get(), views->get(), mine->get(), record};
  // First a record of no views: where none can be written, nothing is mounted, and the step's
  // other tasks find that record (or fail the same way) rather than mount views of their own while
  // this task's staging places the same names.
  if (auto none = write_record(at, tmpdir::ViewRecord{}); !none) {
    return none.error();
  }
  return make_views(at, specs);
}

// This node's name. slurmstepd sets SLURMD_NODENAME only after task_init_privileged, so until
// then the environment holds the user's (a step launched from the batch script carries the batch
// node's name): the name is taken first from the step's node list at this node's index (the job's
// for the batch step, whose environment may carry a step list from where it was submitted), then
// SLURMD_NODENAME, else the host name, and a candidate counts only where the base it names holds
// this job's directory owned by its user (the prolog's, on this host).
std::optional<std::string> this_node(spank_t sp, const Config& config, const Job& job)
{
  std::vector<std::string> candidates;
  std::uint32_t node_id = 0;
  std::uint32_t step_id = 0;
  if (spank_get_item(sp, S_JOB_NODEID, &node_id) == ESPANK_SUCCESS) {
    const bool batch = spank_get_item(sp, S_JOB_STEPID, &step_id) == ESPANK_SUCCESS &&
                       (step_id == SLURM_BATCH_SCRIPT || step_id == SLURM_INTERACTIVE_STEP);
    for (const char* var : {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}) {
      if (batch && std::string_view(var) == "SLURM_STEP_NODELIST") {
        continue;
      }
      auto list = task_env(sp, var);
      auto hosts = list ? ddp::expand_hostlist(*list) : Result<std::vector<std::string>>(Error::internal(""));
      if (hosts && node_id < hosts->size()) {
        candidates.push_back((*hosts)[node_id]);
      }
    }
  }
  if (auto n = task_env(sp, "SLURMD_NODENAME")) {
    candidates.push_back(*n);
  }
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) {
    std::string h(host);
    candidates.push_back(h.substr(0, h.find('.')));
  }
  for (const auto& node : candidates) {
    auto base = node.empty() ? Result<UniqueFd>(Error::internal("")) : tmpdir::open_base(config, node);
    if (!base) {
      continue;
    }
    auto dir = fs::open_beneath(base->get(), tmpdir::job_dir_name(job.id), O_RDONLY | O_DIRECTORY);
    struct stat st {};
    if (dir && ::fstat(dir->get(), &st) == 0 && st.st_uid == job.uid) {
      return node;
    }
  }
  return std::nullopt;
}

std::vector<std::string>& task_views_store()
{
  static std::vector<std::string> v; // view_line()s
  return v;
}

std::string& task_daemon_silence_store()
{
  static std::string why; // the ViewRecord's daemon_silent
  return why;
}

} // namespace

const std::vector<std::string>& task_views() { return task_views_store(); }

const std::string& task_daemon_silence() { return task_daemon_silence_store(); }

int stepd_task_init_privileged(spank_t sp, const Config* config)
{
  if (!config || !options().stage_data || !config->daemon.cache_views) {
    return 0;
  }
  const auto request = tmpdir::effective_request(*config, options().tmpdir);
  if (request != tmpdir::Request::create) {
    return 0; // no directory, or kept for its user after the job: no views (links as before)
  }
  Job job;
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
  auto specs = task_env(sp, k_stage_env); // canonical (absolute) sources only
  if (!specs || spank_get_item(sp, S_JOB_ID, &job.id) != ESPANK_SUCCESS ||
      spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS ||
      uid == 0) {
    return 0;
  }
  job.uid = uid;
  job.gid = gid;
  auto node = this_node(sp, *config, job);
  if (!node) {
    say("job " + std::to_string(job.id) + ": cannot tell this node's name (no base holds the job's directory); "
        "staging without views");
    return 0;
  }
  // A miss this job claims is read into the cache and shown as a view only where the job reads its
  // sources on this node itself: a broadcast's receivers wait for its copy instead.
  stage::StageRequest bcast;
  broadcast_role(sp, *config, bcast);
  const auto claimed =
    bcast.bcast == stage::BcastRole::none ? proto::ClaimedMisses::read_for_view : proto::ClaimedMisses::staged;
  auto views = views_for(*config, job, *node, *specs, claimed);
  if (!views) {
    say("job " + std::to_string(job.id) + ": " + views.error().message + "; staging without views");
    return 0;
  }
  task_views_store().clear();
  for (const auto& v : views->views) {
    task_views_store().push_back(*tmpdir::view_line(v)); // checked when the record was read or made
  }
  task_daemon_silence_store() = views->daemon_silent;
  return 0;
}

} // namespace stagehand::plugin
