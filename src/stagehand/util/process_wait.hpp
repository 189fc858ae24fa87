// Bounded waits on child processes, and the reaper of those that outlive SIGKILL.
// A process blocked in the kernel on a filesystem that never answers (a user's hung FUSE server)
// does not end on SIGKILL until the call returns; no prolog, epilog or daemon thread may wait for
// it without a bound. Such a survivor is handed to the reaper: in the daemon a thread reaps it
// when it finally ends and logs it; in a short-lived process (prolog, epilog, CLI) nothing waits
// for it and, once this process exits, init reaps it.
#pragma once

#include "stagehand/util/result.hpp"

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

namespace stagehand::proc {

using Clock = std::chrono::steady_clock;

// How long a child may take to end after SIGKILL before it counts as stuck in the kernel.
inline constexpr std::chrono::milliseconds k_kill_grace{3000};

// What a wait does, once a child that leads a process group has ended, with what is left in that
// group: nothing, or SIGKILL to all of it, sent before the child is reaped (the unreaped child
// holds the group's id, so the signal cannot reach a group that took the id since), and then up
// to k_kill_grace for all of it to be gone (an io error with EBUSY, the child reaped, if not).
enum class LeftInGroup { kept, killed };

// Waits until our child `pid` ends or `until` passes: its wait status (as waitpid gives it), or an
// io error with ETIMEDOUT, the child still running and not reaped. A pidfd (Linux 5.3) is polled;
// without one (ENOSYS, a seccomp filter), waitid(WNOHANG) every few milliseconds.
Result<int> wait_until(pid_t pid, Clock::time_point until, LeftInGroup left = LeftInGroup::kept);
// The same without a bound (a blocking wait): its wait status.
Result<int> wait_ended(pid_t pid, LeftInGroup left);

// SIGKILL, then up to `grace` for it to end: its wait status. A child still there is handed to
// the reaper and the result is an io error (ETIMEDOUT) saying so; `who` ("a child of user alice")
// names it there and in the reaper's log lines.
Result<int> kill_and_wait(pid_t pid, const std::string& who, std::chrono::milliseconds grace = k_kill_grace,
                          LeftInGroup left = LeftInGroup::kept);

// Whether `e` (from kill_and_wait or wait_or_kill) says the child was left behind, stuck in the
// kernel: whatever it was blocked on (a filesystem) will likely block the next try too.
bool left_behind(const Error& e);

// Waits up to `bound` for the child to end by itself, then kill_and_wait. `what` names the
// process in the error when it had to be killed ("the copying process").
Result<int> wait_or_kill(pid_t pid, const std::string& what, Clock::time_point until,
                         std::chrono::milliseconds grace = k_kill_grace);

// The daemon: starts a thread that reaps survivors when they end. Elsewhere survivors are only
// reaped by a later hand-over's sweep, or by init once this process exits.
void enable_reaper_thread();
// Where the reaper's lines go (the daemon: spdlog); without it they are dropped.
void set_reaper_log(std::function<void(const std::string&)> log);
// Children handed to the reaper that have not ended yet (for the daemon's metrics).
std::size_t stuck_children();

// "killed by signal 9 (SIGKILL)", "exit status 3": a wait status in words.
std::string describe_status(int status);

// Test seam: the signal kill_and_wait sends goes through `kill`. A test makes a child survive
// "SIGKILL" by sending SIGSTOP instead (a stopped child does not end); reset with wait_hooks() = {}.
struct WaitHooks
{
  std::function<int(pid_t, int)> kill;
};
WaitHooks& wait_hooks();

} // namespace stagehand::proc
