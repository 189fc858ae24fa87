// Work done with another user's rights: fork (proc::Process, util/subprocess.hpp: the same bounded
// waits and kills, and the same words for a child's end, as every other child), drop to that user
// (setgroups, setresgid, setresuid; never root), run a function, and talk to the parent over a
// socket that can carry descriptors.
// The parent holds a Child; a child of the job user and a child of the service user are the two
// sides of every cache fill, and the type of what each returns says which side made it.
#pragma once

#include "stagehand/util/child_filter.hpp"
#include "stagehand/util/fd.hpp"
#include "stagehand/util/result.hpp"
#include "stagehand/util/subprocess.hpp"

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace stagehand::ipc {

struct Credentials
{
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups; // supplementary groups
  std::string what;          // "job user 1001", "service user stagehand": for messages
  std::vector<int> cpus;     // where the child runs: a job's CPUs for its work; empty: where the daemon runs
  ChildFilter filter = ChildFilter::user_work; // the service user's: cache_work (util/child_filter.hpp)
};

// The supplementary groups of `uid` from the user database (for work not started by the user).
Result<Credentials> credentials_of(uid_t uid, gid_t gid);
// The service user `name` ([daemon] user): never root, its primary group only, and its children
// doing the cache's work under ChildFilter::cache_work.
Result<Credentials> service_credentials(const std::string& name);

// How long a child that has closed its socket or sent its last word may take to exit.
inline constexpr std::chrono::milliseconds k_exit_bound{10000};
// How much more memory (RLIMIT_DATA: heap and private mappings) a child may take than it inherits
// from its parent: generous for a copy or a cache fill, yet a 50-million-entry listing for a user
// cannot take the node's memory in the daemon's cgroup.
inline constexpr std::uint64_t k_child_memory = 4ULL << 30;

class Child
{
public:
  Child() = default;
  Child(proc::Process process, UniqueFd sock, UniqueFd err = {})
    : m_sock(std::move(sock)), m_process(std::move(process)), m_stderr(std::move(err))
  {
  }
  Child(Child&& other) noexcept;
  Child& operator=(Child&& other) noexcept;
  ~Child() = default; // m_process kills and reaps a child still running (bounded, as kill())

  int sock() const { return m_sock.get(); }
  pid_t pid() const { return m_process.pid(); }
  // Waits for the child to exit, at most `bound` (then kills it): its exit code, or an error
  // naming the signal that killed it, why it refused to run user work, that it ran out of memory,
  // or that it could not be killed. After kill(), what the kill found.
  Result<int> wait(std::chrono::milliseconds bound = k_exit_bound);
  // SIGKILL to the child and its process group (whatever it forked), and a bounded wait
  // (`grace`; shorter where a lock is held meanwhile). A child blocked in the kernel on a
  // filesystem that never answers outlives SIGKILL: it is handed to the reaper (see
  // util/process_wait.hpp), and the next wait() says so.
  void kill(std::chrono::milliseconds grace = proc::k_kill_grace);
  // Whether the child is stopped (SIGSTOP, a tracer): it would never answer.
  bool stopped() const;
  // The child closed its socket without a word (`seen`): its own reason when it gave one by its
  // ending (out of memory, refused, killed), else `seen`.
  Error why_closed(const Error& seen);

private:
  UniqueFd m_sock;
  proc::Process m_process;            // after m_sock: killed before the socket closes
  UniqueFd m_stderr;                  // the child's stderr (a sealed memfd), read when a signal ends it
  std::optional<Result<int>> m_ended; // set by kill() and wait(): what wait() then says
};

// Test seams, reset with child_hooks() = {}: `before_drop` runs in the child after its
// descriptors are set up, before it drops to the user's credentials (a test holds it there to
// attach a tracer); `suid_dumpable` is where the child reads fs.suid_dumpable (a test points it at
// a file of its own rather than change the node's setting under other tests).
struct ChildHooks
{
  std::function<void()> before_drop;
  std::string suid_dumpable = "/proc/sys/fs/suid_dumpable";
};
ChildHooks& child_hooks();

// Forks a child that drops to `creds` and runs `body(sock)`; the child keeps only `sock` (as fd 3)
// and `keep` (renumbered to 4, 5, ... in order; body receives them in the same order), with stdin
// and stdout on /dev/null, stderr in a small sealed file whose text a signal's ending quotes
// ("killed by signal 6 (SIGABRT) (it wrote: terminate called after...)"), a core size of 0, at most
// k_child_memory more memory than it inherits, the parent-death signal set to SIGKILL, and its own
// process group (led by it, so Child::kill reaches what it forks), which neither it nor what it
// forks can leave (creds.filter, installed after the drop) and which is killed when it ends
// (Child::wait): nothing it started outlives it. It refuses to run body when fs.suid_dumpable is 1
// or a tracer attached while it changed uid (only root could attach before; only the user in that
// window). The child must not log: it exits with body's return value.
using ChildBody = std::function<int(int sock, const std::vector<int>& kept)>;
Result<Child> spawn_as(const Credentials& creds, const std::vector<int>& keep, const ChildBody& body);

// One message (a frame of text) with `fds` attached (SCM_RIGHTS; at most 8, more is refused).
Status send_message(int sock, const std::string& text, const std::vector<int>& fds = {});

struct Message
{
  std::string text;
  std::vector<UniqueFd> fds;
};
// Receives one message; a deadline of zero waits forever. EOF before a message is an io error.
Result<Message> receive_message(int sock, std::chrono::milliseconds deadline = std::chrono::milliseconds{0});

} // namespace stagehand::ipc
