// The one way stagehand runs a child process. proc::Process is the primitive every caller forks
// through: fork (the child leading a process group of its own, or not), a bounded wait, a kill
// that never waits without a bound (a child that outlives SIGKILL, blocked in the kernel on a
// filesystem that never answers, is handed to the reaper, process_wait.hpp), and the end as one
// Ended: exited, signalled or timed out, in words by describe() ("exit status 3", "killed by
// signal 9 (SIGKILL)", "no answer within 200 ms"). On it: proc::run (a program: its descriptors
// set up, exec, output collected), proc::run_function (a piece of work that may block in the
// kernel), and ipc::spawn_as (ipc/child.hpp: work with a user's credentials over a socket).
#pragma once

#include "stagehand/util/process_wait.hpp"
#include "stagehand/util/result.hpp"

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace stagehand::proc {

// How a child ended.
enum class EndKind {
  exited,    // it exited: exit_code()
  signalled, // a signal ended it
  timed_out, // its time bound ran out: it was killed, or, outliving SIGKILL, left to the reaper
};

// How a child ended, and what it wrote (when captured).
struct Ended
{
  EndKind kind = EndKind::exited;
  int status = 0; // as waitpid gives it; timed_out: what the kill found (none when left behind)
  std::string output;
  std::chrono::milliseconds bound{0}; // timed_out: the bound it ran out of
  std::string left_behind;            // timed_out, and SIGKILL did not end it: why (the reaper has it)

  static Ended of_status(int status); // exited or signalled
  bool succeeded() const;             // exited with status 0
  bool timed_out() const { return kind == EndKind::timed_out; }
  std::optional<int> exit_code() const; // none unless it exited
  // describe_status(status); timed_out: "no answer within N ms" and, when left behind, "(why)".
  std::string describe() const;
};

// Whether a forked child leads a process group of its own: then a kill reaches whatever it forked.
enum class Group { shared, own };

// A forked child, owned: waited for with a bound, killed (bounded) when dropped still running.
class Process
{
public:
  Process() = default;
  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept; // kills the child it held
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process(); // kill() of a child still running

  // Forks; the child runs `in_child`, which never returns (it execs or _exits). `who` names the
  // child in messages and in the reaper's lines ("sh", "a child of user alice").
  static Result<Process> start(std::string who, Group group, const std::function<void()>& in_child);

  pid_t pid() const { return m_pid; } // -1 once reaped or left to the reaper
  bool running() const { return m_pid > 0; }
  const std::string& who() const { return m_who; }

  // Waits for it to end, past `until` (none: without a bound) killed: an Ended of kind timed_out
  // (its bound left 0 for the caller, who knows it). An error only when it cannot be waited for.
  Result<Ended> wait(std::optional<Clock::time_point> until);
  // SIGKILL (to its group too, when it leads one) and up to `grace` for it to end: how it
  // ended. A survivor goes to the reaper: kill_and_wait's error (ETIMEDOUT; left_behind() says so).
  // Without a child, an internal error.
  Result<Ended> kill(std::chrono::milliseconds grace = k_kill_grace);
  // Whether it is stopped (SIGSTOP, a tracer): it would never answer. Asked of the kernel as its
  // parent (WNOWAIT: the state stays for wait()), not read in /proc, which a unit's ProtectProc=
  // may hide from a daemon whose child runs as another user.
  bool stopped() const;

private:
  Process(pid_t pid, std::string who, Group group) : m_pid(pid), m_who(std::move(who)), m_group(group) {}
  pid_t m_pid = -1;
  std::string m_who;
  Group m_group = Group::shared;
};

// What a run whose time bound runs out returns: an io error (ETIMEDOUT) "WHO: no answer within N
// ms", or, for a caller that acts on it (says how far the work got), an Ended of kind timed_out.
enum class OnTimeout { error, ended };

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
  OnTimeout on_timeout = OnTimeout::error; // past `until`; the exit grace running out is always an error
};

// Runs `program`; stdin is /dev/null. With `until` (or `deadline`), past it the program is killed
// and the result is an io error (ETIMEDOUT) "ARGV0: no answer within N ms" (or an Ended of kind
// timed_out, with the output read so far: program.on_timeout). Without, its output is
// read without a bound; once that closes it has `exit_grace` to end, and a program whose output is
// not captured is waited for without a bound (the task's own staging helper, which the job's end
// kills). A program that cannot be run says "cannot run ARGV0[: reason]" on its stderr and exits 127.
Result<Ended> run(const Program& program, std::optional<Clock::time_point> until);
Result<Ended> run(const Program& program, std::chrono::milliseconds deadline);

// Runs `work` in a forked child (for work that may block in the kernel), what it returns sent back
// as `output`; its exit status is 0. Past `until` it is killed: an io error (ETIMEDOUT) naming
// `who`, or with OnTimeout::ended an Ended of kind timed_out.
Result<Ended> run_function(const std::function<std::string()>& work, const std::string& who, Clock::time_point until,
                           OnTimeout on_timeout = OnTimeout::error);

} // namespace stagehand::proc

namespace stagehand {

// proc::run of `argv` with its output captured, stderr discarded, within `deadline`.
Result<proc::Ended> run_program(const std::vector<std::string>& argv, std::chrono::milliseconds deadline,
                                std::size_t max_output = 16U << 20);

} // namespace stagehand
