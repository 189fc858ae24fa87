// The one way stagehand runs a program or a piece of work in a child process: fork, the child's
// descriptors set up, exec (or the function), output collected, a bounded wait (or, where staging
// takes as long as its data, an unbounded one), and the end in words (describe_status: "exit
// status 3", "killed by signal 9 (SIGKILL)"). A child that outlives SIGKILL (blocked in the kernel
// on a filesystem that never answers) is handed to the reaper (process_wait.hpp), never waited for
// without a bound. Children that run with a user's credentials and talk over a socket are
// ipc::spawn_as (ipc/child.hpp), over the same bounded waits.
#pragma once

#include "stagehand/util/process_wait.hpp"
#include "stagehand/util/result.hpp"

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace stagehand::proc {

// Where a program's standard output or error goes.
enum class Output {
  discard, // /dev/null
  capture, // collected (stdout and stderr together when both are captured)
  inherit, // ours
};

struct Program
{
  std::vector<std::string> argv;               // argv[0] is looked up in PATH when it has no '/'
  std::optional<std::vector<std::string>> env; // the program's whole environment; none: ours
  Output out = Output::capture;
  Output err = Output::discard;
  int keep_fd = -1; // a descriptor the program inherits (as /dev/fd/N)
  // Run in the child just before exec (async-signal-safe calls only: limits, say).
  void (*before_exec)() = nullptr;
  std::size_t max_output = 16U << 20; // more is a limit error (the program killed)
  // How long it may take to end once its output has closed, before it is killed.
  std::chrono::milliseconds exit_grace{1000};
};

// How a child ended, and what it wrote (when captured).
struct Ended
{
  int status = 0; // as waitpid gives it
  std::string output;
  bool succeeded() const;        // exit status 0
  std::optional<int> exit_code() const; // none when killed by a signal
  std::string describe() const;  // describe_status(status)
};

// Runs `program`; stdin is /dev/null. With `until` (or `deadline`), past it the program is killed
// and the result is an io error (ETIMEDOUT) "ARGV0: no answer within N ms". Without, its output is
// read without a bound; once that closes it has `exit_grace` to end, and a program whose output is
// not captured is waited for without a bound (the task's own staging helper, which the job's end
// kills). A program that cannot be run says "cannot run ARGV0[: reason]" on its stderr and exits 127.
Result<Ended> run(const Program& program, std::optional<Clock::time_point> until);
Result<Ended> run(const Program& program, std::chrono::milliseconds deadline);

// Runs `work` in a forked child (for work that may block in the kernel), what it returns sent back
// as `output`; its exit status is 0. Past `until` it is killed: an io error (ETIMEDOUT) naming `who`.
Result<Ended> run_function(const std::function<std::string()>& work, const std::string& who,
                           Clock::time_point until);

} // namespace stagehand::proc

namespace stagehand {

struct ProcessOutput
{
  int exit_code = -1; // 128 + the signal when killed by one
  std::string out;
};

// proc::run of `argv` with its output captured, stderr discarded, within `deadline`.
Result<ProcessOutput> run_program(const std::vector<std::string>& argv, std::chrono::milliseconds deadline,
                                  std::size_t max_output = 16U << 20);

} // namespace stagehand
