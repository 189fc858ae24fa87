// check-config, prolog/epilog for slurm.conf, and gc.
#include "commands.hpp"

#include "stagehand/fs/dir_stream.hpp"
#include "stagehand/fs/trusted_dir.hpp"
#include "stagehand/fs/walk.hpp"
#include "stagehand/gc/collect.hpp"
#include "stagehand/ipc/client.hpp"
#include "stagehand/job/hooks.hpp"
#include "stagehand/job/job_env.hpp"
#include "stagehand/tmpdir/lifecycle.hpp"
#include "stagehand/util/units.hpp"

#include <spdlog/spdlog.h>

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string_view>

namespace stagehand::cli {

namespace {

std::optional<std::uint32_t> env_u32(const char* name)
{
  const char* v = std::getenv(name);
  return v ? parse_u32(v) : std::nullopt;
}

std::string default_node()
{
  if (const char* env = std::getenv("SLURMD_NODENAME"); env && *env) {
    return env;
  }
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) {
    return "";
  }
  std::string h = host;
  return h.substr(0, h.find('.'));
}

// How long one `stagehand gc` without a daemon removes before it stops (root-side work on what
// users left is always bounded).
constexpr std::chrono::seconds k_gc_budget{120};

// gc without a daemon: the same plan, with the evidence this process can gather.
int local_gc(const Config& config, const CommonArgs& common)
{
  auto base = tmpdir::base_path(config, common.node);
  if (!base) {
    spdlog::error("{}", base.error().message);
    return 1;
  }
  auto base_fd = fs::open_trusted_dir(*base, fs::CreateMissing::no);
  if (!base_fd) {
    spdlog::error("{}", base_fd.error().message);
    return 1;
  }
  auto snap = gc::snapshot_base(base_fd->get(), std::time(nullptr));
  if (!snap) {
    spdlog::error("{}", snap.error().message);
    return 1;
  }
  gc::Evidence evidence;
  evidence.live_steps = gc::live_step_jobs();
  evidence.pending_stage_outs = gc::pending_stage_outs(config, common.node);
  const gc::Options options = gc::options_from(config);
  evidence.running_here = gc::needs_slurmctld(*snap, evidence, options)
                            ? gc::slurmctld_running(common.node, "squeue", std::chrono::seconds(15))
                            : std::optional(std::set<std::uint32_t>{});
  if (!evidence.running_here) {
    spdlog::warn("slurmctld did not answer (squeue): job directories whose job may still run are kept");
  }
  auto plan = gc::make_plan(*snap, evidence, options);
  if (common.dry_run) {
    for (const auto& a : plan.remove) {
      std::printf("would remove %s/%s (%s)\n", base->c_str(), a.name.c_str(), gc::reason_name(a.reason));
    }
    for (const auto& stray : plan.strays) {
      std::printf("would keep %s/%s under a record (a stage-out nothing copies any more)\n", base->c_str(), stray.name.c_str());
    }
    return 0;
  }
  auto applied = gc::apply(base_fd->get(), plan, std::chrono::steady_clock::now() + k_gc_budget);
  for (const auto& m : applied.detached) {
    std::printf("detached a mount a user left on %s/%s\n", base->c_str(), m.c_str());
  }
  for (const auto& r : applied.recorded) {
    std::printf("kept %s/%s under a record (a stage-out nothing copies any more)\n", base->c_str(), r.c_str());
  }
  for (const auto& a : applied.done) {
    std::printf("removed %s/%s (%s)\n", base->c_str(), a.name.c_str(), gc::reason_name(a.reason));
  }
  for (const auto& v : applied.views_removed) {
    std::printf("removed %s/%s (the cache views of an ended job)\n", base->c_str(), v.c_str());
  }
  for (const auto& f : applied.failures) {
    spdlog::error("{}: {}", *base, f.message);
  }
  if (applied.out_of_time) {
    spdlog::warn("gc: stopped after {} s; run it again for the rest", k_gc_budget.count());
  }
  return applied.failures.empty() && !applied.out_of_time ? 0 : 1;
}

// --- Prolog=/Epilog= beside the plugin -------------------------------------------------------
//
// These commands always run beside the plugin: its options need stagehand.so in plugstack.conf,
// and slurmd then runs the plugin's job_prolog/job_epilog too, first, and the Prolog=/Epilog=
// script right after it, in the same thread with the same environment (Slurm's
// src/plugins/prep/script/prep_script_slurmd.c, slurmd_script()). Before the script runs, slurmd
// also clears the SPANK option variables from that environment (spank_clear_remote_options_env),
// so SPANK__SLURM_SPANK_OPTION_stagehand_tmpdir is usually gone: the script cannot tell
// --tmpdir=keep from the environment. So each command first looks at what the plugin left, and
// does the plugin's work only where the plugin's hook did not.

enum class JobDirState {
  absent, // no base/job_<id>
  fresh,  // as a job start makes it: a real directory (not a mount), the job's uid and gid, 0700,
          // empty, no keep marker
  kept,   // a keep marker names this very directory (the job's end kept it)
  other,  // anything else: stale, planted, used, unreadable
};

// What base/job_<id> is now, looked at without following a symlink or entering a mount.
JobDirState inspect_job_dir(const Config& config, const tmpdir::JobContext& job, std::string* path)
{
  auto base = tmpdir::base_path(config, job.node);
  if (!base) {
    return JobDirState::other;
  }
  const std::string name = tmpdir::job_dir_name(job.owner.job_id);
  *path = *base + "/" + name;
  auto base_fd = tmpdir::open_base(config, job.node);
  if (!base_fd) {
    return JobDirState::other; // (the hook says why)
  }
  // (No stat by name: a mount point, a symlink, is refused before anything behind it is asked.)
  auto probe = fs::open_beneath(base_fd->get(), name, O_PATH);
  if (!probe) {
    return probe.error().code == ENOENT ? JobDirState::absent : JobDirState::other;
  }
  struct stat st {};
  if (::fstat(probe->get(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return JobDirState::other;
  }
  // The keep marker, root-owned in the root-owned base (tmpdir::mark_kept), names this very
  // directory when the job's end kept it.
  const std::string marker_name = tmpdir::keep_marker_name(job.owner.job_id);
  if (auto marker = tmpdir::read_keep_marker(base_fd->get(), marker_name)) {
    return marker->ino == st.st_ino ? JobDirState::kept : JobDirState::other;
  }
  if (struct stat ms {}; ::fstatat(base_fd->get(), marker_name.c_str(), &ms, AT_SYMLINK_NOFOLLOW) == 0) {
    return JobDirState::other; // a marker that cannot be read
  }
  if (st.st_uid != job.owner.uid || st.st_gid != job.owner.gid || (st.st_mode & 07777) != 0700) {
    return JobDirState::other;
  }
  auto dir = fs::open_beneath(base_fd->get(), name, O_RDONLY | O_DIRECTORY);
  fs::DirStream d = dir ? fs::dir_stream(std::move(*dir)) : nullptr;
  if (!d) {
    return JobDirState::other;
  }
  while (const struct dirent* e = ::readdir(d.get())) {
    if (std::string_view(e->d_name) != "." && std::string_view(e->d_name) != "..") {
      return JobDirState::other;
    }
  }
  return JobDirState::fresh;
}

} // namespace

std::optional<CommonArgs> parse_common(const std::vector<std::string>& args)
{
  CommonArgs out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const auto& a = args[i];
    if ((a == "--config" || a == "--node") && i + 1 < args.size()) {
      (a == "--config" ? out.config_path : out.node) = args[++i];
    } else if (a == "--dry-run") {
      out.dry_run = true;
    } else if (a == "--json") {
      out.json = true;
    } else if (a == "--all") {
      out.all = true;
    } else if (!a.starts_with("--")) {
      out.positional.push_back(a);
    } else {
      spdlog::error("unknown argument \"{}\"", a);
      return std::nullopt;
    }
  }
  if (out.node.empty()) {
    out.node = default_node();
  }
  return out;
}

int cmd_check_config(const std::vector<std::string>& args)
{
  if (args.size() != 1) {
    spdlog::error("usage: stagehand check-config FILE");
    return 2;
  }
  auto config = load_config(args[0], OwnerCheck::require_root_owned);
  if (!config) {
    spdlog::error("{}", config.error().message);
    return 1;
  }
  std::printf("%s: ok\n", args[0].c_str());
  std::printf("  [tmpdir] base=%s default=%s export_tmpdir=%s keep_for=%llds\n", config->tmpdir.base.c_str(),
              config->tmpdir.by_default ? "true" : "false", config->tmpdir.export_tmpdir ? "true" : "false",
              static_cast<long long>(config->tmpdir.keep_for.count()));
  std::printf("  [ddp] port_min=%d port_max=%d master_addr=%s\n", config->ddp.port_min, config->ddp.port_max,
              config->ddp.master_addr.c_str());
  std::printf("  [daemon] socket=%s cache_dir=%s cache_max_bytes=%llu user=%s\n", config->daemon.socket.c_str(),
              config->daemon.cache_dir.c_str(), static_cast<unsigned long long>(config->daemon.cache_max_bytes),
              config->daemon.user.c_str());
  return 0;
}

// Prolog/epilog scripts always exit 0: a non-zero exit drains the node. Problems go to stderr,
// which slurmd logs only at SlurmdDebug=debug2 when the script exits 0 (run_command's output).
int cmd_job_script(const std::vector<std::string>& args, Hook hook)
{
  const char* what = hook == Hook::prolog ? "prolog" : "epilog";
  auto common = parse_common(args);
  if (!common) {
    return 0;
  }
  auto job_id = env_u32("SLURM_JOB_ID");
  auto uid = env_u32("SLURM_JOB_UID");
  const char* node = std::getenv("SLURMD_NODENAME");
  if (!job_id || !uid || !node) {
    spdlog::error("{}: SLURM_JOB_ID, SLURM_JOB_UID and SLURMD_NODENAME must be set (run from slurm.conf {}=)",
                  what, hook == Hook::prolog ? "Prolog" : "Epilog");
    return 0;
  }
  tmpdir::JobContext job;
  job.owner.job_id = *job_id;
  job.owner.uid = *uid;
  if (auto gid = env_u32("SLURM_JOB_GID")) {
    job.owner.gid = *gid;
  } else if (const struct passwd* pw = ::getpwuid(*uid)) {
    job.owner.gid = pw->pw_gid;
  } else {
    spdlog::error("{}: job {}: SLURM_JOB_GID unset and uid {} unknown", what, *job_id, *uid);
    return 0;
  }
  job.node = node;
  auto config = load_config(common->config_path, OwnerCheck::require_root_owned);
  if (!config) {
    spdlog::error("{}: job {}: {}", what, *job_id, config.error().message);
    return 0;
  }
  // What the plugin's own job prolog/epilog, which slurmd ran just before, left.
  std::string path;
  const JobDirState state = inspect_job_dir(*config, job, &path);
  if (hook == Hook::prolog && state == JobDirState::fresh) {
    spdlog::info("prolog: job {}: {} is there as a job start makes it (the plugin's job prolog): left as it is",
                 *job_id, path);
    return 0;
  }
  if (hook == Hook::epilog && state == JobDirState::absent) {
    spdlog::info("epilog: job {}: no directory {} (the plugin's job epilog moved it): nothing to do", *job_id, path);
    return 0;
  }
  if (hook == Hook::epilog && state == JobDirState::kept) {
    spdlog::info("epilog: job {}: {} is kept (--tmpdir=keep, by the plugin's job epilog): left as it is", *job_id,
                 path);
    return 0;
  }
  std::optional<tmpdir::Request> option;
  if (const char* v = std::getenv(tmpdir::k_job_script_option_env)) {
    if (auto r = tmpdir::parse_option(v)) {
      option = *r;
    }
  }
  // Otherwise the plugin's hook did not do it here: the same work as the plugin's, --stage-out
  // included.
  auto done = hook == Hook::prolog
                ? job::job_start(*config, job, job::staging_of_job())
                : job::job_end(*config, job, tmpdir::effective_request(*config, option), job::k_epilog_removal_budget,
                               job::stage_out_of_job());
  if (!done) {
    spdlog::error("{}: job {}: {}", what, *job_id, done.error().message);
    return 0;
  }
  spdlog::info("{}: job {}: {}", what, *job_id, *done);
  return 0;
}

int cmd_gc(const std::vector<std::string>& args)
{
  auto common = parse_common(args);
  if (!common) {
    return 2;
  }
  if (::geteuid() != 0) {
    spdlog::error("gc: for root only");
    return 1;
  }
  auto config = load_config(common->config_path, OwnerCheck::require_root_owned);
  if (!config) {
    spdlog::error("{}", config.error().message);
    return 1;
  }
  auto reply = ipc::call(expand_node(config->daemon.socket, common->node), proto::Gc{common->dry_run});
  if (!reply && (reply.error().code == ENOENT || reply.error().code == ECONNREFUSED)) {
    spdlog::info("no daemon on node {} ({}): collecting here", common->node, reply.error().message);
    return local_gc(*config, *common);
  }
  if (!reply) { // (one still collecting, say: a second collection beside it is not started)
    spdlog::error("stagehandd on node {}: {}: nothing collected here (a collection beside the daemon's is not "
                  "started)", common->node, reply.error().message);
    return 1;
  }
  if (reply->error) {
    spdlog::error("{}", reply->error->message);
    return 1;
  }
  auto gc = proto::parse_gc_reply(reply->result_json);
  if (!gc) {
    spdlog::error("{}", gc.error().message);
    return 1;
  }
  for (const auto& a : gc->actions) {
    std::printf("%s %s (%s)\n", common->dry_run ? "would remove" : "removed", a.path.c_str(), a.reason.c_str());
  }
  for (const auto& e : gc->errors) {
    spdlog::error("{}", e);
  }
  return gc->errors.empty() ? 0 : 1;
}

} // namespace stagehand::cli
