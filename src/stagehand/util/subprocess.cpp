// proc::Process (fork, bounded wait, bounded kill, the end as an Ended), and on it a program or a
// function run with a pipe, a poll deadline and a bounded wait.
#include "stagehand/util/subprocess.hpp"

#include "stagehand/util/fd.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace stagehand::proc {

Ended Ended::of_status(int status)
{
  Ended e;
  e.kind = WIFSIGNALED(status) ? EndKind::signalled : EndKind::exited;
  e.status = status;
  return e;
}

bool Ended::succeeded() const { return exit_code() == 0; }

std::optional<int> Ended::exit_code() const
{
  return kind == EndKind::exited && WIFEXITED(status) ? std::optional<int>(WEXITSTATUS(status)) : std::nullopt;
}

std::string Ended::describe() const
{
  if (kind != EndKind::timed_out) {
    return describe_status(status);
  }
  return "no answer within " + std::to_string(bound.count()) + " ms" +
         (left_behind.empty() ? std::string() : " (" + left_behind + ")");
}

Process::Process(Process&& other) noexcept
  : m_pid(std::exchange(other.m_pid, -1)), m_who(std::move(other.m_who)), m_group(other.m_group)
{
}

Process& Process::operator=(Process&& other) noexcept
{
  if (this != &other) {
    if (running()) {
      (void)kill();
    }
    m_pid = std::exchange(other.m_pid, -1);
    m_who = std::move(other.m_who);
    m_group = other.m_group;
  }
  return *this;
}

Process::~Process()
{
  if (running()) {
    (void)kill();
  }
}

Result<Process> Process::start(std::string who, Group group, const std::function<void()>& in_child)
{
  const pid_t pid = ::fork();
  if (pid < 0) {
    return Error::from_errno("cannot start " + who);
  }
  if (pid == 0) {
    if (group == Group::own) {
      ::setpgid(0, 0);
    }
    in_child();
    ::_exit(127); // never reached: in_child execs or exits
  }
  if (group == Group::own) {
    (void)::setpgid(pid, pid); // as the child does: a kill of the group can never come before it
  }
  return Process(pid, std::move(who), group);
}

namespace {

// Kills `child`, whose time bound ran out: an Ended of kind timed_out; left_behind says why when
// SIGKILL did not end it (the reaper has it).
Result<Ended> killed_at_bound(Process& child)
{
  auto killed = child.kill();
  if (!killed && !left_behind(killed.error())) {
    return killed.error();
  }
  Ended out;
  out.kind = EndKind::timed_out;
  out.status = killed ? killed->status : 0;
  out.left_behind = killed ? std::string() : killed.error().message;
  return out;
}

} // namespace

Result<Ended> Process::wait(std::optional<Clock::time_point> until)
{
  if (!running()) {
    return Error::internal("no child to wait for");
  }
  // A child leading its own group ends with what it left there (ipc::spawn_as: what it forked).
  const LeftInGroup left = m_group == Group::own ? LeftInGroup::killed : LeftInGroup::kept;
  if (!until) {
    auto status = wait_ended(m_pid, left);
    m_pid = -1;
    if (!status) {
      return Error::io("cannot wait for " + m_who + ": " + status.error().message, status.error().code);
    }
    return Ended::of_status(*status);
  }
  auto status = wait_until(m_pid, *until, left);
  if (status || status.error().code != ETIMEDOUT) {
    m_pid = -1; // ended, or it cannot be waited for (never killed then: its pid may be another's)
    return status ? Result<Ended>(Ended::of_status(*status)) : Result<Ended>(status.error());
  }
  return killed_at_bound(*this);
}

Result<Ended> Process::kill(std::chrono::milliseconds grace)
{
  if (!running()) {
    return Error::internal("no child to kill");
  }
  if (m_group == Group::own) {
    // Its process group first: anything it forked (the unreaped child holds the id). Through the
    // same seam as kill_and_wait's own signal, so that a test's "survivor" survives this too.
    const auto& hook = wait_hooks().kill;
    (void)(hook ? hook(-m_pid, SIGKILL) : ::kill(-m_pid, SIGKILL));
  }
  // Its group is waited for too (what it forked may be blocked in a system call).
  const LeftInGroup left = m_group == Group::own ? LeftInGroup::killed : LeftInGroup::kept;
  auto ended = kill_and_wait(m_pid, m_who, grace, left);
  m_pid = -1;
  if (!ended) {
    return ended.error();
  }
  return Ended::of_status(*ended);
}

bool Process::stopped() const
{
  if (!running()) {
    return false;
  }
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(m_pid), &info, WSTOPPED | WNOHANG | WNOWAIT) != 0) {
    return false;
  }
  return info.si_pid == m_pid && (info.si_code == CLD_STOPPED || info.si_code == CLD_TRAPPED);
}

namespace {

// Reads the child's output until it closes or `until` passes; false when the time ran out.
// Output past `max_output` stops the reading (`over` set).
bool collect(int fd, std::optional<Clock::time_point> until, std::size_t max_output, std::string& out, bool& over)
{
  char buf[65536];
  for (;;) {
    int timeout = -1;
    if (until) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*until - Clock::now());
      if (left.count() <= 0) {
        return false;
      }
      timeout = static_cast<int>(std::min<std::int64_t>(left.count(), 1 << 30));
    }
    struct pollfd pfd {fd, POLLIN, 0};
    const int r = ::poll(&pfd, 1, timeout);
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r == 0) {
      return false;
    }
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return true;
    }
    out.append(buf, static_cast<std::size_t>(n));
    if (out.size() > max_output) {
      over = true;
      return true;
    }
  }
}

// `child`'s time bound ran out while it wrote `output`: killed, and said as `on_timeout` asks.
Result<Ended> time_is_up(Process& child, std::string output, std::chrono::milliseconds bound, OnTimeout on_timeout)
{
  auto out = killed_at_bound(child);
  if (!out) {
    return out.error();
  }
  out->bound = bound;
  out->output = std::move(output);
  if (on_timeout == OnTimeout::ended) {
    return out;
  }
  return Error::io(child.who() + ": " + out->describe(), ETIMEDOUT);
}

// How a run reads and waits: its bound (`until`, which is `bound` from the start), what it may
// write, how long it may take to end once its output closed, and what a timeout returns.
struct Bounds
{
  std::optional<Clock::time_point> until;
  std::chrono::milliseconds bound;
  std::size_t max_output;
  std::chrono::milliseconds grace;
  OnTimeout on_timeout;
};

// The rest of a run once the child is started and writes to `rd` (or not: rd invalid).
Result<Ended> finish(Process& child, UniqueFd rd, Bounds b)
{
  std::string output;
  bool over = false;
  if (rd.valid() && !collect(rd.get(), b.until, b.max_output, output, over)) {
    return time_is_up(child, std::move(output), b.bound, b.on_timeout);
  }
  if (over) {
    (void)child.kill();
    return Error::limit(child.who() + ": more output than expected");
  }
  const bool had_output = rd.valid();
  rd.reset();
  if (!b.until && had_output) {
    b.until = Clock::now(); // its output closed: it is exiting; `grace` to do it
  }
  // Its output closed: it is exiting. Still within the deadline (plus a moment), never beyond.
  // Without a bound and without output: waited for to its end.
  auto ended = child.wait(b.until ? std::optional(std::max(*b.until, Clock::now() + b.grace)) : std::nullopt);
  if (!ended) {
    return ended.error();
  }
  if (ended->timed_out()) {
    return Error::io(ended->left_behind.empty() ? child.who() + " did not end in time: killed" : ended->left_behind,
                     ETIMEDOUT);
  }
  ended->output = std::move(output);
  return ended;
}

std::vector<char*> pointers(std::vector<std::string>& strings)
{
  std::vector<char*> out;
  for (auto& s : strings) {
    out.push_back(s.data());
  }
  out.push_back(nullptr);
  return out;
}

Result<Ended> run_program_until(const Program& program, std::optional<Clock::time_point> until,
                                std::chrono::milliseconds deadline_ms)
{
  if (program.argv.empty()) {
    return Error::internal("run: empty argv");
  }
  const bool captured = program.out == Output::capture || program.err == Output::capture;
  int p[2] = {-1, -1};
  if (captured && ::pipe2(p, O_CLOEXEC) != 0) {
    return Error::from_errno("pipe");
  }
  UniqueFd rd(p[0]);
  UniqueFd wr(p[1]);
  // Everything the child needs is ready before fork: it only opens, dups and execs.
  std::vector<std::string> argv_s = program.argv;
  std::vector<std::string> env_s = program.env.value_or(std::vector<std::string>{});
  auto argv = pointers(argv_s);
  auto envp = pointers(env_s);
  const bool own_env = program.env.has_value();
  auto child = Process::start(program.argv[0], Group::shared, [&] {
    const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    ::dup2(devnull, 0);
    auto route = [&](Output o, int target) {
      if (o == Output::capture) {
        ::dup2(wr.get(), target);
      } else if (o == Output::discard) {
        ::dup2(devnull, target);
      }
    };
    route(program.out, 1);
    route(program.err, 2);
    if (program.keep_fd >= 0) {
      ::fcntl(program.keep_fd, F_SETFD, 0);
    }
    if (program.before_exec != nullptr) {
      program.before_exec();
    }
    if (own_env) {
      ::execvpe(argv[0], argv.data(), envp.data());
    } else {
      ::execvp(argv[0], argv.data());
    }
    // "cannot run ARGV0[: No such file or directory]" on its stderr. Only async-signal-safe calls
    // here: another thread may hold stdio's locks.
    static const char k_cannot[] = "cannot run ";
    static const char k_missing[] = ": No such file or directory\n";
    const bool missing = errno == ENOENT;
    (void)!::write(2, k_cannot, sizeof k_cannot - 1);
    (void)!::write(2, argv[0], ::strlen(argv[0]));
    (void)!::write(2, missing ? k_missing : "\n", missing ? sizeof k_missing - 1 : 1);
    ::_exit(127);
  });
  if (!child) {
    return child.error();
  }
  wr.reset();
  return finish(*child, std::move(rd),
                Bounds{until, deadline_ms, program.max_output, program.exit_grace, program.on_timeout});
}

} // namespace

Result<Ended> run(const Program& program, std::optional<Clock::time_point> until)
{
  const auto left =
    until ? std::chrono::duration_cast<std::chrono::milliseconds>(*until - Clock::now()) : std::chrono::milliseconds(0);
  return run_program_until(program, until, left);
}

Result<Ended> run(const Program& program, std::chrono::milliseconds deadline)
{
  return run_program_until(program, Clock::now() + deadline, deadline);
}

Result<Ended> run_function(const std::function<std::string()>& work, const std::string& who, Clock::time_point until,
                           OnTimeout on_timeout)
{
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    return Error::from_errno("pipe");
  }
  UniqueFd rd(p[0]);
  UniqueFd wr(p[1]);
  auto child = Process::start(who, Group::shared, [&] {
    rd.reset();
    const std::string said = work();
    (void)!::write(wr.get(), said.data(), said.size());
    ::_exit(0);
  });
  if (!child) {
    return child.error();
  }
  wr.reset();
  const auto deadline_ms = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
  return finish(*child, std::move(rd), Bounds{until, deadline_ms, 1U << 20, std::chrono::milliseconds(2000), on_timeout});
}

} // namespace stagehand::proc

namespace stagehand {

Result<proc::Ended> run_program(const std::vector<std::string>& argv, std::chrono::milliseconds deadline,
                                std::size_t max_output)
{
  proc::Program p;
  p.argv = argv;
  p.max_output = max_output;
  return proc::run(p, deadline);
}

} // namespace stagehand
