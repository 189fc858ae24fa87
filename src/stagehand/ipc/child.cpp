// The child side of spawn_as (descriptors, limits, privilege drop, the checks around it), how its
// end reads, and SCM_RIGHTS messaging.
#include "stagehand/ipc/child.hpp"

#include "stagehand/proto/frame.hpp"
#include "stagehand/util/cpu_list.hpp"
#include "stagehand/util/escape.hpp"
#include "stagehand/util/landlock.hpp"
#include "stagehand/util/priority.hpp"
#include "stagehand/util/process_wait.hpp"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace stagehand::ipc {

namespace {

// Closes every descriptor from `first` up: close_range, or, where it fails (ENOSYS before Linux
// 5.9, EPERM under a seccomp filter), one by one up to the highest limit: never does a daemon fd
// reach a user's child because a call failed.
void close_from(int first)
{
  if (::close_range(static_cast<unsigned>(first), ~0U, 0) == 0) {
    return;
  }
  struct rlimit nofile {};
  rlim_t last = 1U << 20;
  if (::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_max != RLIM_INFINITY) {
    last = std::min<rlim_t>(last, std::max(nofile.rlim_cur, nofile.rlim_max));
  }
  for (rlim_t fd = static_cast<rlim_t>(first); fd < last; ++fd) {
    ::close(static_cast<int>(fd));
  }
}

constexpr std::size_t k_max_message = 1U << 20;
constexpr std::size_t k_max_fds = 8;

// How a child that never ran body (or could not finish it) ends; wait() says each in words.
constexpr int k_exit_out_of_memory = 124;
constexpr int k_exit_suid_dumpable = 125;
constexpr int k_exit_traced = 126;
constexpr int k_exit_unconfined = 119;

// The child's own small reads of /proc: no allocation, no stdio (it may be forked from threads).
// At most `len` - 1 bytes of `fd`, from its start, NUL-terminated; false when nothing was read.
bool read_small(int fd, char* buf, std::size_t len)
{
  ssize_t n;
  do {
    n = ::pread(fd, buf, len - 1, 0);
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    return false;
  }
  buf[n] = '\0';
  return true;
}

bool read_small(const char* path, char* buf, std::size_t len)
{
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  const bool ok = read_small(fd, buf, len);
  ::close(fd);
  return ok;
}

// The TracerPid of a /proc/PID/status text; -1 when it is not there.
long tracer_of(const char* status)
{
  const char* at = std::strstr(status, "\nTracerPid:");
  return at ? std::strtol(at + 11, nullptr, 10) : -1;
}

// fs.suid_dumpable=1 makes a process dumpable again at every uid change (commit_creds), so
// between setresuid and PR_SET_DUMPABLE the job user could attach to the child. With 0 or 2 no
// one but root can; unread (/proc/sys hidden), the tracer check after the drop must decide.
enum class SuidDumpable { user, safe, unknown };
SuidDumpable suid_dumpable(const ChildHooks& hooks)
{
  char buf[16];
  if (!read_small(hooks.suid_dumpable.c_str(), buf, sizeof buf)) {
    return SuidDumpable::unknown;
  }
  return buf[0] == '1' ? SuidDumpable::user : SuidDumpable::safe;
}

// RLIMIT_DATA at what the child inherits (statm's data: heap, private mappings, stack) plus
// k_child_memory; left alone when statm cannot be read.
void bound_memory()
{
  char buf[256];
  if (!read_small("/proc/self/statm", buf, sizeof buf)) {
    return;
  }
  char* p = buf;
  unsigned long long data_pages = 0;
  for (int field = 0; field < 6; ++field) { // size resident shared text lib data
    data_pages = std::strtoull(p, &p, 10);
  }
  const auto page = static_cast<unsigned long long>(::sysconf(_SC_PAGESIZE));
  struct rlimit data {};
  if (::getrlimit(RLIMIT_DATA, &data) != 0) {
    return;
  }
  // Never above a bound the admin set on the daemon.
  const rlim_t limit = std::min<rlim_t>(data_pages * page + k_child_memory, data.rlim_cur);
  data = {limit, limit};
  ::setrlimit(RLIMIT_DATA, &data);
}

// The child's descriptors: sock -> 3, keep -> 4.. (dup above that range first so nothing is
// clobbered; not to a fixed high number, which a low RLIMIT_NOFILE, 256 say, would refuse); 0 and
// 1 on /dev/null, 2 on `err` (its stderr file) or /dev/null without one, every other one closed.
// Returns the new numbers of `keep`.
std::vector<int> renumber_fds(int sock, const std::vector<int>& keep, int err)
{
  const int above = static_cast<int>(4 + keep.size());
  std::vector<int> moved;
  int high = ::fcntl(sock, F_DUPFD, above);
  for (int fd : keep) {
    moved.push_back(::fcntl(fd, F_DUPFD, above));
  }
  const int err_high = err >= 0 ? ::fcntl(err, F_DUPFD, above) : -1;
  if (high < 0) {
    ::_exit(120);
  }
  int devnull = ::open("/dev/null", O_RDWR);
  if (devnull >= 0) { // nothing of the parent's: not its log stream either
    ::dup2(devnull, 0);
    ::dup2(devnull, 1);
    ::dup2(err_high >= 0 ? err_high : devnull, 2);
  }
  ::dup2(high, 3);
  std::vector<int> kept;
  for (std::size_t i = 0; i < moved.size(); ++i) {
    if (moved[i] < 0 || ::dup2(moved[i], static_cast<int>(4 + i)) < 0) {
      ::_exit(120);
    }
    kept.push_back(static_cast<int>(4 + i));
  }
  close_from(static_cast<int>(4 + moved.size()));
  return kept;
}

// The TracerPid of process `parent`; 0 when it cannot be read.
long tracer_of_parent(pid_t parent)
{
  char buf[4096];
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/status", static_cast<int>(parent));
  return read_small(path, buf, sizeof buf) ? tracer_of(buf) : 0;
}

// To `creds` for good (never root), or the child ends.
void drop_privileges(const Credentials& creds)
{
  if (creds.uid == 0 || ::setgroups(creds.groups.size(), creds.groups.data()) != 0 ||
      ::setresgid(creds.gid, creds.gid, creds.gid) != 0 || ::setresuid(creds.uid, creds.uid, creds.uid) != 0) {
    ::_exit(121);
  }
  // Never regain root: check that the drop really happened.
  if (::setuid(0) == 0 || ::geteuid() != creds.uid) {
    ::_exit(121);
  }
}

// Ends the child if someone attached while the uid changed: its own TracerPid, read through
// `status_fd` (its /proc/self/status, opened as root; closed here), unless it is `parent_tracer`.
void exit_if_traced(int status_fd, long parent_tracer, SuidDumpable dumpable)
{
  char buf[4096];
  const long tracer = status_fd >= 0 && read_small(status_fd, buf, sizeof buf) ? tracer_of(buf) : -1;
  if (status_fd >= 0) {
    ::close(status_fd);
  }
  if (tracer > 0 ? tracer != parent_tracer : tracer < 0 && dumpable != SuidDumpable::safe) {
    ::_exit(k_exit_traced);
  }
}

[[noreturn]] void run_body(const ChildBody& body, const std::vector<int>& kept)
{
  ::signal(SIGPIPE, SIG_IGN);
  int rc = 1;
  try {
    rc = body(3, kept);
  } catch (const std::bad_alloc&) {
    rc = k_exit_out_of_memory;
  } catch (...) {
    rc = 123;
  }
  ::_exit(rc);
}

// The directories among a child's descriptors.
std::vector<int> kept_dirs(const std::vector<int>& kept)
{
  std::vector<int> dirs;
  for (int fd : kept) {
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
      dirs.push_back(fd);
    }
  }
  return dirs;
}

[[noreturn]] void child_main(const Credentials& creds, int sock, int err, const std::vector<int>& keep,
                             const ChildBody& body, pid_t parent, const ChildHooks& hooks)
{
  const std::vector<int> kept = renumber_fds(sock, keep, err); // descriptors first

  // Already in its own process group (proc::Group::own, as root): Child::kill ends whatever it forks.
  struct rlimit core {0, 0};
  ::setrlimit(RLIMIT_CORE, &core);
  // A job's work at a job's priority, below the daemon's request threads (util/priority.hpp).
  (void)set_thread_nice(k_job_nice);
  bound_memory();
  // On the job's cores, where its own staging would run (best effort: CPUs gone offline since).
  (void)run_on(creds.cpus);
  // A failed allocation ends the child with a code the parent names, whatever body catches.
  std::set_new_handler([] { ::_exit(k_exit_out_of_memory); });
  const SuidDumpable dumpable = suid_dumpable(hooks);
  if (dumpable == SuidDumpable::user) {
    ::_exit(k_exit_suid_dumpable);
  }
  // Opened as root, read after the drop: whether someone attached while the uid changed. A
  // tracer the parent has too (`strace -f` on the daemon, root's) is allowed.
  const long parent_tracer = tracer_of_parent(parent);
  const int status_fd = ::open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  if (hooks.before_drop) {
    hooks.before_drop();
  }
  drop_privileges(creds);
  // Not dumpable whatever fs.suid_dumpable says: the job user must not ptrace or read the memory
  // of a child that the daemon trusts to report what it saw.
  ::prctl(PR_SET_DUMPABLE, 0);
  exit_if_traced(status_fd, parent_tracer, dumpable);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) {
    ::_exit(122);
  }
  // What it forks cannot leave its group, which the parent kills when it ends (proc::Process): no
  // process it started outlives it. The cache's work also hands nothing out and makes nothing
  // others could write, and (where the kernel has Landlock) writes nowhere but beneath the
  // directories it was given: its fill's.
  if (creds.filter == ChildFilter::cache_work && !confine_writes(kept_dirs(kept))) {
    ::_exit(k_exit_unconfined);
  }
  if (!install_child_filter(creds.filter)) {
    ::_exit(k_exit_unconfined);
  }
  run_body(body, kept);
}

} // namespace

Result<Credentials> credentials_of(uid_t uid, gid_t gid)
{
  Credentials c;
  c.uid = uid;
  c.gid = gid;
  c.what = "uid " + std::to_string(uid);
  struct passwd pw {};
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(uid, &pw, buf.data(), buf.size(), &found) != 0 || !found) {
    c.groups = {gid}; // unknown to the user database: its primary group only
    return c;
  }
  int n = 64;
  std::vector<gid_t> groups(static_cast<std::size_t>(n));
  if (::getgrouplist(pw.pw_name, gid, groups.data(), &n) < 0) {
    groups.resize(static_cast<std::size_t>(n));
    if (::getgrouplist(pw.pw_name, gid, groups.data(), &n) < 0) {
      return Error::io("cannot read the groups of " + std::string(pw.pw_name), EINVAL);
    }
  }
  groups.resize(static_cast<std::size_t>(n));
  c.groups = std::move(groups);
  c.what = std::string("user ") + pw.pw_name;
  return c;
}

Result<Credentials> service_credentials(const std::string& name)
{
  struct passwd pw {};
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (::getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found) != 0 || !found) {
    return Error::config("no such user \"" + name + "\"");
  }
  if (pw.pw_uid == 0) {
    return Error::config("user \"" + name + "\" is root: refused");
  }
  auto c = credentials_of(pw.pw_uid, pw.pw_gid);
  if (c) {
    c->groups = {pw.pw_gid}; // a service user needs no supplementary groups
    c->what = "service user " + name;
    c->filter = ChildFilter::cache_work;
  }
  return c;
}

ChildHooks& child_hooks()
{
  static ChildHooks hooks;
  return hooks;
}

Child::Child(Child&& other) noexcept
  : m_sock(std::move(other.m_sock)), m_process(std::move(other.m_process)), m_stderr(std::move(other.m_stderr)),
    m_ended(std::exchange(other.m_ended, std::nullopt))
{
}

Child& Child::operator=(Child&& other) noexcept
{
  if (this != &other) {
    kill();
    m_process = std::move(other.m_process);
    m_sock = std::move(other.m_sock);
    m_stderr = std::move(other.m_stderr);
    m_ended = std::exchange(other.m_ended, std::nullopt);
  }
  return *this;
}

namespace {

// A child's stderr: a memfd sealed at k_stderr_room bytes, so what the child writes (nothing,
// unless the C or C++ library aborts it: "terminate called after throwing...", "malloc(): ...")
// costs the node no more than that (pages are taken only as it writes). None when it cannot be
// made: the child's stderr is /dev/null.
constexpr std::size_t k_stderr_room = 64U << 10;
constexpr std::size_t k_stderr_said = 300; // at most this much of it in a message: its end

UniqueFd stderr_file()
{
#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U // Linux 6.3; vm.memfd_noexec=2 refuses a memfd without it
#endif
  UniqueFd fd(::memfd_create("stagehand-child-stderr", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL));
  if (!fd.valid() && errno == EINVAL) { // a kernel before 6.3
    fd = UniqueFd(::memfd_create("stagehand-child-stderr", MFD_CLOEXEC | MFD_ALLOW_SEALING));
  }
  if (!fd.valid() || ::ftruncate(fd.get(), static_cast<off_t>(k_stderr_room)) != 0 ||
      ::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) != 0) {
    return UniqueFd();
  }
  return fd;
}

// What a child wrote last to its stderr file (the file's offset, which it shares with the
// child's descriptor, is where it stopped), on one line: whole lines where the last k_stderr_said
// bytes hold a line's start, its control characters escaped, runs of blanks and line ends as one
// space; empty when it wrote nothing.
std::string stderr_text(int fd)
{
  const off_t end = fd >= 0 ? ::lseek(fd, 0, SEEK_CUR) : -1;
  if (end <= 0) {
    return {};
  }
  if (end >= static_cast<off_t>(k_stderr_room)) { // what it wrote last did not fit
    return "more than " + std::to_string(k_stderr_room >> 10) + " KiB, its last words lost";
  }
  const off_t from = std::max<off_t>(0, end - static_cast<off_t>(k_stderr_said));
  char buf[k_stderr_said];
  const ssize_t n = ::pread(fd, buf, static_cast<std::size_t>(end - from), from);
  if (n <= 0) {
    return {};
  }
  ssize_t i = 0;
  if (from > 0) { // from the first whole line in it, if there is one; else not inside a character
    const auto* nl = static_cast<const char*>(std::memchr(buf, '\n', static_cast<std::size_t>(n)));
    if (nl != nullptr && nl + 1 < buf + n) {
      i = nl + 1 - buf;
    }
    while (i < n && (static_cast<unsigned char>(buf[i]) & 0xC0U) == 0x80U) { // a UTF-8 continuation
      ++i;
    }
  }
  std::string text;
  bool blank = false;
  for (; i < n; ++i) {
    const bool space = buf[i] == ' ' || buf[i] == '\n' || buf[i] == '\t' || buf[i] == '\r';
    if (space) {
      blank = !text.empty();
      continue;
    }
    if (blank) {
      text += ' ';
      blank = false;
    }
    text += buf[i];
  }
  return escape_control(text);
}

// How spawn_as's child (`who`) ended, in its terms: its exit code, or why it did not run body;
// `wrote`: what it wrote to its stderr, said with a signal that ended it (an abort's reason).
Result<int> child_ending(const proc::Ended& ended, const std::string& who, const std::string& wrote)
{
  const auto code = ended.exit_code();
  if (!code) {
    const bool signalled = ended.kind == proc::EndKind::signalled && !wrote.empty();
    return Error::io(ended.describe() + (signalled ? " (it wrote: " + wrote + ")" : std::string()), EINTR);
  }
  switch (*code) {
  case k_exit_out_of_memory:
    return Error::io(who + " ran out of memory (work done for users may take " + std::to_string(k_child_memory >> 30) +
                       " GiB more than its parent; RLIMIT_DATA)",
                     ENOMEM);
  case k_exit_suid_dumpable:
    return Error::refused("fs.suid_dumpable=1: refused to run user work (a user could attach to a process of "
                          "theirs that root starts for them; set it to 0 or 2)",
                          EPERM);
  case k_exit_unconfined:
    return Error::refused(who + ": the kernel refused the seccomp filter that keeps what it forks in its process "
                                "group (a kernel without CONFIG_SECCOMP_FILTER?), or its Landlock rules: refused to "
                                "run the work",
                          EPERM);
  case k_exit_traced:
    return Error::refused(who + ": a tracer attached while it changed to the user's uid: refused to run user work",
                          EPERM);
  default:
    return *code;
  }
}

} // namespace

void Child::kill(std::chrono::milliseconds grace)
{
  if (m_process.running()) {
    auto ended = m_process.kill(grace); // its process group too: whatever it forked
    m_ended = ended ? child_ending(*ended, m_process.who(), stderr_text(m_stderr.get())) : Result<int>(ended.error());
  }
}

bool Child::stopped() const { return m_process.stopped(); }

Result<int> Child::wait(std::chrono::milliseconds bound)
{
  if (!m_process.running()) {
    return m_ended ? *m_ended : Result<int>(Error::internal("no child to wait for"));
  }
  auto ended = m_process.wait(proc::Clock::now() + bound);
  if (!ended) {
    m_ended = ended.error();
  } else if (ended->timed_out() && !ended->left_behind.empty()) {
    m_ended = Error::io(ended->left_behind, ETIMEDOUT);
  } else if (ended->timed_out()) { // it ended on SIGKILL: say why it was sent
    const auto ms = bound.count();
    m_ended = Error::io(m_process.who() + " did not exit within " +
                          (ms % 1000 == 0 ? std::to_string(ms / 1000) + " s" : std::to_string(ms) + " ms") +
                          " of its last word: killed",
                        ETIMEDOUT);
  } else {
    m_ended = child_ending(*ended, m_process.who(), stderr_text(m_stderr.get()));
  }
  return *m_ended;
}

Error Child::why_closed(const Error& seen)
{
  auto ended = wait(std::chrono::milliseconds(2000)); // it closed its end: it is exiting
  if (!ended) {
    return ended.error().code == ETIMEDOUT ? seen : ended.error();
  }
  Error said = seen;
  if (*ended != 0) {
    said.message += " (" + m_process.who() + " ended with exit status " + std::to_string(*ended) + ")";
  }
  return said;
}

Result<Child> spawn_as(const Credentials& creds, const std::vector<int>& keep, const ChildBody& body)
{
  if (creds.uid == 0) {
    return Error::internal("refusing to run user work as root");
  }
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    return Error::from_errno("socketpair");
  }
  UniqueFd parent_end(sv[0]);
  UniqueFd child_end(sv[1]);
  const pid_t parent = ::getpid();
  const ChildHooks& hooks = child_hooks(); // made before the fork
  UniqueFd err = stderr_file();
  auto process = proc::Process::start("a child of " + creds.what, proc::Group::own, [&] {
    parent_end.release(); // closed by close_range in the child; never run its destructor
    child_main(creds, child_end.get(), err.get(), keep, body, parent, hooks);
  });
  if (!process) {
    return process.error();
  }
  return Child(std::move(*process), std::move(parent_end), std::move(err));
}

Status send_message(int sock, const std::string& text, const std::vector<int>& fds)
{
  if (fds.size() > k_max_fds) {
    return Error::internal("send_message: " + std::to_string(fds.size()) + " descriptors, at most " +
                           std::to_string(k_max_fds) + " fit a message");
  }
  const std::string frame = proto::encode_frame(text);
  std::size_t sent = 0;
  bool first = true;
  while (sent < frame.size()) {
    struct iovec iov {const_cast<char*>(frame.data() + sent), frame.size() - sent};
    struct msghdr msg {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * k_max_fds)] = {};
    if (first && !fds.empty()) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    ssize_t n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return Error::from_errno("send");
    }
    sent += static_cast<std::size_t>(n);
    first = false;
  }
  return ok_status();
}

Result<Message> receive_message(int sock, std::chrono::milliseconds deadline)
{
  proto::FrameReader reader(k_max_message);
  Message out;
  const auto until = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    if (auto text = reader.next()) {
      out.text = std::move(*text);
      return out;
    }
    if (deadline.count() > 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
      struct pollfd p {sock, POLLIN, 0};
      int r = ::poll(&p, 1, static_cast<int>(std::max<long long>(0, left.count())));
      if (r == 0) {
        return Error::io("no answer in time", ETIMEDOUT);
      }
      if (r < 0 && errno != EINTR) {
        return Error::from_errno("poll");
      }
      if (r < 0) {
        continue;
      }
    }
    char buf[65536];
    // No further than this frame: what a child said after it is the next call's.
    struct iovec iov {buf, std::min(sizeof buf, reader.missing())};
    struct msghdr msg {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * k_max_fds)];
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return Error::from_errno("receive");
    }
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (std::size_t i = 0; i < count; ++i) {
          int fd;
          std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
          out.fds.emplace_back(fd);
        }
      }
    }
    if ((msg.msg_flags & MSG_CTRUNC) != 0) {
      return Error::io("too many descriptors in one message", EINVAL);
    }
    if (n == 0) {
      return Error::io("the other side closed the connection", EPIPE);
    }
    if (auto st = reader.feed(buf, static_cast<std::size_t>(n)); !st) {
      return st.error();
    }
  }
}

} // namespace stagehand::ipc
