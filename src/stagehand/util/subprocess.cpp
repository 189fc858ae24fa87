// fork/exec with a pipe and a poll deadline.
#include "stagehand/util/subprocess.hpp"

#include "stagehand/util/fd.hpp"
#include "stagehand/util/process_wait.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

namespace stagehand {

Result<ProcessOutput> run_program(const std::vector<std::string>& argv, std::chrono::milliseconds deadline,
                                  std::size_t max_output)
{
  if (argv.empty()) {
    return Error::internal("run_program: empty argv");
  }
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    return Error::from_errno("pipe");
  }
  UniqueFd rd(p[0]);
  UniqueFd wr(p[1]);
  std::vector<char*> args;
  for (const auto& a : argv) {
    args.push_back(const_cast<char*>(a.c_str()));
  }
  args.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    return Error::from_errno("fork");
  }
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_RDWR);
    ::dup2(devnull, 0);
    ::dup2(wr.get(), 1);
    ::dup2(devnull, 2);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  wr.reset();
  ProcessOutput out;
  const auto until = std::chrono::steady_clock::now() + deadline;
  bool timed_out = false;
  char buf[65536];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    struct pollfd pfd {rd.get(), POLLIN, 0};
    int r = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) {
      continue;
    }
    if (r == 0) {
      timed_out = true;
      break;
    }
    ssize_t n = ::read(rd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;
    }
    out.out.append(buf, static_cast<std::size_t>(n));
    if (out.out.size() > max_output) {
      (void)proc::kill_and_wait(pid, argv[0]);
      return Error::limit(argv[0] + ": more output than expected");
    }
  }
  if (timed_out) {
    auto killed = proc::kill_and_wait(pid, argv[0]);
    return Error::io(argv[0] + ": no answer within " + std::to_string(deadline.count()) + " ms" +
                       (killed ? std::string() : " (" + killed.error().message + ")"),
                     ETIMEDOUT);
  }
  // Its output closed: it is exiting. Still within the deadline (plus a moment), never beyond.
  auto ended =
    proc::wait_or_kill(pid, argv[0], std::max(until, std::chrono::steady_clock::now() + std::chrono::seconds(1)));
  if (!ended) {
    return ended.error(); // "ARGV0 did not end in time: killed", or it was left behind
  }
  const int status = *ended;
  out.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return out;
}

} // namespace stagehand
