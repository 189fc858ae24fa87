// fork/exec (or a function) with a pipe, a poll deadline and a bounded wait.
#include "stagehand/util/subprocess.hpp"

#include "stagehand/util/fd.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace stagehand::proc {

bool Ended::succeeded() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

std::optional<int> Ended::exit_code() const
{
  return WIFEXITED(status) ? std::optional<int>(WEXITSTATUS(status)) : std::nullopt;
}

std::string Ended::describe() const { return describe_status(status); }

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

// The rest of a run once the child is started and writes to `rd` (or not: rd invalid).
Result<Ended> finish(pid_t pid, UniqueFd rd, const std::string& who, std::optional<Clock::time_point> until,
                     std::chrono::milliseconds deadline_ms, std::size_t max_output, std::chrono::milliseconds grace)
{
  Ended out;
  bool over = false;
  if (rd.valid() && !collect(rd.get(), until, max_output, out.output, over)) {
    auto killed = kill_and_wait(pid, who);
    return Error::io(who + ": no answer within " + std::to_string(deadline_ms.count()) + " ms" +
                       (killed ? std::string() : " (" + killed.error().message + ")"),
                     ETIMEDOUT);
  }
  if (over) {
    (void)kill_and_wait(pid, who);
    return Error::limit(who + ": more output than expected");
  }
  const bool had_output = rd.valid();
  rd.reset();
  if (!until && had_output) {
    until = Clock::now(); // its output closed: it is exiting; `grace` to do it
  }
  if (!until) {
    int status = 0;
    pid_t waited = 0;
    while ((waited = ::waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    if (waited < 0) {
      return Error::from_errno("cannot wait for " + who);
    }
    out.status = status;
    return out;
  }
  // Its output closed: it is exiting. Still within the deadline (plus a moment), never beyond.
  auto ended = wait_or_kill(pid, who, std::max(*until, Clock::now() + grace));
  if (!ended) {
    return ended.error(); // "WHO did not end in time: killed", or it was left behind
  }
  out.status = *ended;
  return out;
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
  const pid_t pid = ::fork();
  if (pid < 0) {
    return Error::from_errno("cannot start " + program.argv[0]);
  }
  if (pid == 0) {
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
  }
  wr.reset();
  return finish(pid, std::move(rd), program.argv[0], until, deadline_ms, program.max_output, program.exit_grace);
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

Result<Ended> run_function(const std::function<std::string()>& work, const std::string& who, Clock::time_point until)
{
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    return Error::from_errno("pipe");
  }
  UniqueFd rd(p[0]);
  UniqueFd wr(p[1]);
  const pid_t pid = ::fork();
  if (pid < 0) {
    return Error::from_errno("fork");
  }
  if (pid == 0) {
    rd.reset();
    const std::string said = work();
    (void)!::write(wr.get(), said.data(), said.size());
    ::_exit(0);
  }
  wr.reset();
  const auto deadline_ms = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
  return finish(pid, std::move(rd), who, until, deadline_ms, 1U << 20, std::chrono::milliseconds(2000));
}

} // namespace stagehand::proc

namespace stagehand {

Result<ProcessOutput> run_program(const std::vector<std::string>& argv, std::chrono::milliseconds deadline,
                                  std::size_t max_output)
{
  proc::Program p;
  p.argv = argv;
  p.max_output = max_output;
  auto ended = proc::run(p, deadline);
  if (!ended) {
    return ended.error();
  }
  const int status = ended->status;
  return ProcessOutput{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), std::move(ended->output)};
}

} // namespace stagehand
