// Work done with another user's rights: fork, drop to that user (setgroups, setresgid, setresuid;
// never root), run a function, and talk to the parent over a socket that can carry descriptors.
// The parent holds a Child; a child of the job user and a child of the service user are the two
// sides of every cache fill, and the type of what each returns says which side made it.
#pragma once

#include "stagehand/util/fd.hpp"
#include "stagehand/util/result.hpp"

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace stagehand::ipc {

struct Credentials
{
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups; // supplementary groups
  std::string what;          // "job user 1001", "service user stagehand": for messages
};

// The supplementary groups of `uid` from the user database (for work not started by the user).
Result<Credentials> credentials_of(uid_t uid, gid_t gid);
Result<Credentials> credentials_of_name(const std::string& name);

class Child
{
public:
  Child() = default;
  Child(pid_t pid, UniqueFd sock) : m_pid(pid), m_sock(std::move(sock)) {}
  Child(Child&& other) noexcept;
  Child& operator=(Child&& other) noexcept;
  ~Child(); // kills and reaps a child still running

  int sock() const { return m_sock.get(); }
  pid_t pid() const { return m_pid; }
  // Waits for the child to exit; its exit code, or an error naming the signal that killed it.
  Result<int> wait();
  // Kills the child and its process group (whatever it forked), then reaps it.
  void kill();
  // Whether the child is stopped (SIGSTOP, a tracer): it would never answer.
  bool stopped() const;

private:
  pid_t m_pid = -1;
  UniqueFd m_sock;
};

// Forks a child that drops to `creds` and runs `body(sock)`; the child keeps only `sock` (as fd 3)
// and `keep` (renumbered to 4, 5, ... in order; body receives them in the same order), with stdin
// on /dev/null, a core size of 0, the parent-death signal set to SIGKILL, and its own process
// group (led by it, so Child::kill reaches what it forks). The child must not
// log: it exits with body's return value.
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
