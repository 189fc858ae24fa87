// stagehandd: the node daemon. Always in the foreground (systemd Type=notify), logs to stderr.
#include "daemon.hpp"
#include "sd_notify.hpp"

#include "stagehand/config/config.hpp"
#include "stagehand/service/reload_thread.hpp"
#include "stagehand/service/server.hpp"
#include "stagehand/tmpdir/job_dir.hpp"
#include "stagehand/util/priority.hpp"
#include "stagehand/util/process_wait.hpp"
#include "stagehand/util/child_filter.hpp"
#include "stagehand/util/landlock.hpp"
#include "stagehand/util/subprocess.hpp"

#include "common/log_format.hpp"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>

using namespace stagehand;

namespace {

constexpr const char* k_usage = "usage: stagehandd [--config FILE] [--node NAME] [--debug]\n"
                                "  --config FILE  the stagehand.toml (default /etc/slurm/stagehand.toml)\n"
                                "  --node NAME    this node's Slurm name, for %n (default: the short host name)\n";

std::string short_hostname()
{
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) {
    return "";
  }
  std::string h = host;
  return h.substr(0, h.find('.'));
}

// The command line into `config_path` and `node`; an exit status when there is nothing more to do
// (--help, or a mistake).
std::optional<int> parse_arguments(int argc, char** argv, std::string& config_path, std::string& node)
{
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--config" && i + 1 < argc) {
      config_path = argv[++i];
    } else if (a == "--node" && i + 1 < argc) {
      node = argv[++i];
    } else if (a == "--debug") {
      spdlog::set_level(spdlog::level::debug);
    } else if (a == "--help" || a == "-h") {
      std::fputs(k_usage, stdout);
      return 0;
    } else {
      std::fputs(k_usage, stderr);
      return 2;
    }
  }
  return std::nullopt;
}

// Signals arrive on a descriptor, read by the server loop; children start with them unblocked.
UniqueFd signal_descriptor()
{
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  sigaddset(&mask, SIGHUP);
  ::pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  return UniqueFd(::signalfd(-1, &mask, SFD_CLOEXEC));
}

// At least 8192 open files where the hard limit allows.
void raise_open_files()
{
  struct rlimit files {};
  if (::getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < 8192) {
    files.rlim_cur = std::min<rlim_t>(8192, files.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &files);
  }
}

// Serves until SIGTERM or SIGINT, then stops: requests in progress get a moment to finish.
int serve(daemon::Daemon& d, UniqueFd listen, int signal_fd)
{
  struct rlimit files {};
  ::getrlimit(RLIMIT_NOFILE, &files);
  const auto limits = service::limits_within(files.rlim_cur);
  service::Server server([&d](const proto::Request& request, const service::Peer& peer,
                              service::Responder& out) { d.handle(request, peer, out); },
                         std::move(listen), limits,
                         [&d](const proto::Request& request, const service::Peer& peer) {
                           return d.cannot_serve_now(request, peer);
                         });
  spdlog::info("listening on {} (requests at once: {}, {} per user; past that a request waits up to {} s)",
               d.socket_path(), limits.max_in_flight, limits.max_in_flight_per_uid,
               std::chrono::duration_cast<std::chrono::seconds>(limits.queue_wait).count());
  daemon::sd_notify("READY=1\nSTATUS=serving on " + d.socket_path());
  // SIGHUP: a reload on a thread of its own, so that one that waits holds up no request.
  std::atomic<bool> stopping{false};
  service::ReloadThread reloads([&d, &stopping] {
    daemon::sd_notify("RELOADING=1");
    if (auto st = d.reload(); !st) {
      spdlog::error("reload: {} (keeping the previous configuration)", st.error().message);
    }
    if (!stopping) {
      daemon::sd_notify("READY=1");
    }
  });
  server.run(signal_fd, [&reloads] { reloads.ask(); });
  stopping = true;
  reloads.close(); // a reload asked and not begun is not begun now
  daemon::sd_notify("STOPPING=1");
  ::unlink(d.socket_path().c_str());
  // Requests in progress (and a reload) get a moment to finish; a staging cut short falls back in
  // the job.
  for (int i = 0; i < 100 && (server.in_flight() > 0 || reloads.busy()); ++i) {
    ::usleep(100000);
  }
  const bool reload_ended = reloads.stop();
  if (server.in_flight() > 0 || !reload_ended || d.lock_out_of_reach()) {
    // Workers or a reload still run, or the node's lock is held by a thread that waits in the
    // kernel: save the state and leave without running destructors under them.
    d.save_state();
    spdlog::info("stopped ({} requests cut short{}{})", server.in_flight(),
                 reload_ended ? "" : ", a reload left unfinished",
                 d.lock_out_of_reach() ? ", the node cache not answering" : "");
    spdlog::default_logger()->flush();
    ::_exit(0);
  }
  if (!d.stop()) { // the node's lock was taken by a thread that then stopped in the kernel meanwhile
    d.save_state();
    spdlog::info("stopped (the node cache not answering)");
    spdlog::default_logger()->flush();
    ::_exit(0);
  }
  spdlog::info("stopped");
  return 0;
}

// How a probe child that confines itself as a child would ended: 0 confined, 2 without Landlock
// (that is all), anything else refused.
int probe(const char* what, const std::function<int()>& confine)
{
  auto started = proc::Process::start(what, proc::Group::shared, [&] { ::_exit(confine()); });
  auto ended = started ? started->wait(std::nullopt) : Result<proc::Ended>(started.error());
  return ended ? ended->exit_code().value_or(1) : 1;
}

// Once at start, what each child for a user's or the cache's work will find: whether the kernel
// takes the children's filter (without it those children refuse), and whether the cache's fill
// children can confine their writes with Landlock (without it they run unconfined).
void warn_unless_children_confined()
{
  if (!child_filter_built()) {
    spdlog::warn("no seccomp filter for this architecture: what a child forks may leave its process group, "
                 "and then outlive the child; the cache's fill children are not filtered either");
  } else if (probe("a probe of seccomp", [] { return install_child_filter(ChildFilter::cache_work) ? 0 : 1; }) != 0) {
    spdlog::error("the kernel refuses the seccomp filter that keeps a child's processes in its group (a kernel "
                  "without CONFIG_SECCOMP_FILTER?): the children that do users' and the cache's work will refuse to "
                  "run; jobs stage without the cache and --stage-out results stay on the node");
  }
  // As a cache child confines itself (no directory to write beneath: it writes nothing after).
  const int landlock = probe("a probe of Landlock", [] {
    auto confined = confine_writes({});
    return !confined ? 1 : (*confined == WritesConfined::confined ? 0 : 2);
  });
  if (landlock == 2) {
    spdlog::warn("no Landlock (ABI 2: Linux 5.19 with landlock in lsm=, and its calls allowed): the cache's fill "
                 "children are not confined to writing beneath their fill directory (docs/known-limits.md)");
  } else if (landlock != 0) {
    spdlog::error("Landlock refuses the cache's fill children their rules: they will refuse to run; jobs stage "
                  "without the cache");
  }
}

} // namespace

int main(int argc, char** argv)
{
  auto logger = spdlog::stderr_color_mt("stagehandd");
  helper::set_escaping_pattern(*logger, "%^%l%$: %v"); // the journal adds time and unit
  spdlog::set_default_logger(logger);
  std::string config_path{k_default_config_path};
  std::string node;
  if (auto status = parse_arguments(argc, argv, config_path, node)) {
    return *status;
  }
  if (::geteuid() != 0) {
    spdlog::error("must run as root (it manages job directories and drops to job users for their data)");
    return 1;
  }
  if (node.empty()) {
    node = short_hostname();
  }
  if (auto ok = tmpdir::check_node_name(node); !ok) {
    spdlog::error("--node: {}", ok.error().message);
    return 2;
  }
  auto config = load_config(config_path, OwnerCheck::require_root_owned);
  if (!config) {
    spdlog::error("{}", config.error().message);
    return 1;
  }
  // Before any thread: they all inherit it. The request threads answer status and the plugin's
  // calls while the children unpack on every core; the children, the fill and GC threads go back
  // to a job's priority. Under the packaged unit (Nice=-5) it is there already.
  if (thread_nice() > k_control_nice && !set_thread_nice(k_control_nice)) {
    spdlog::info("running at nice {}: no CAP_SYS_NICE for {} (requests answer later under load)", thread_nice(),
                 k_control_nice);
  }
  UniqueFd sigfd = signal_descriptor();
  raise_open_files();

  // A child that outlives SIGKILL (blocked on a user's FUSE server that never answers) is reaped
  // by a thread of its own when it ends; the request that waited for it has long been answered.
  proc::set_reaper_log([](const std::string& line) { spdlog::warn("{}", line); });
  proc::enable_reaper_thread();
  warn_unless_children_confined();

  daemon::Daemon d(std::move(*config), config_path, node);
  if (auto st = d.start(); !st) {
    spdlog::error("{}", st.error().message);
    return 1;
  }
  auto listen = service::listen_socket(d.socket_path());
  if (!listen) {
    spdlog::error("{}", listen.error().message);
    return 1;
  }
  d.start_fill_thread();
  d.start_lock_watch();
  d.start_gc_thread(); // the first collection runs now: trash left while we were down goes first
  return serve(d, std::move(*listen), sigfd.get());
}
