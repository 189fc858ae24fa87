// The children's seccomp filter: classic BPF, a few system calls, written out by hand (no
// libseccomp on the nodes' install list for so small a filter).
#include "stagehand/util/child_filter.hpp"

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>

// Numbers newer than some build hosts' headers: the same on every architecture.
#ifndef __NR_io_uring_setup
#define __NR_io_uring_setup 425 // Linux 5.1
#endif
#ifndef __NR_clone3
#define __NR_clone3 435 // Linux 5.3
#endif
#ifndef __NR_openat2
#define __NR_openat2 437 // Linux 5.6
#endif
#ifndef __NR_pidfd_getfd
#define __NR_pidfd_getfd 438 // Linux 5.6
#endif
#ifndef __NR_fchmodat2
#define __NR_fchmodat2 452 // Linux 6.6
#endif
#ifndef __NR_setxattrat
#define __NR_setxattrat 463 // Linux 6.13
#endif

#ifndef SECCOMP_RET_KILL_PROCESS
#define SECCOMP_RET_KILL_PROCESS SECCOMP_RET_KILL // Linux before 4.14: the thread
#endif

#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#if defined(__x86_64__)
#define STAGEHAND_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define STAGEHAND_AUDIT_ARCH AUDIT_ARCH_AARCH64
#elif defined(__powerpc64__)
#define STAGEHAND_AUDIT_ARCH AUDIT_ARCH_PPC64LE
#endif
#endif

namespace stagehand {

bool child_filter_built()
{
#ifdef STAGEHAND_AUDIT_ARCH
  return true;
#else
  return false;
#endif
}

#ifdef STAGEHAND_AUDIT_ARCH
namespace {

constexpr std::uint32_t k_allow = SECCOMP_RET_ALLOW;
constexpr std::uint32_t k_deny = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
constexpr std::uint32_t k_nosys = SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA);
// Bits no file of a cache fill may have: group or other write, set-user-id, set-group-id.
constexpr std::uint32_t k_shared_bits = S_IWGRP | S_IWOTH | S_ISUID | S_ISGID;

// A filter program in a fixed array (built in the child, after the drop).
class Program
{
public:
  void add(struct sock_filter f)
  {
    if (m_n < m_p.size()) {
      m_p[m_n] = f;
    }
    ++m_n; // past the array: full(), and nothing is installed
  }

  bool full() const { return m_n > m_p.size(); }

  // The call `nr` returns `action`.
  void returns(int nr, std::uint32_t action)
  {
    add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<std::uint32_t>(nr), 0, 1));
    add(BPF_STMT(BPF_RET | BPF_K, action));
  }

  // The call `nr` fails with EPERM when its argument `arg` (the low word: every architecture here
  // is little-endian) has any of `bits`.
  void denied_with_any(int nr, unsigned arg, std::uint32_t bits) { denied_if(nr, arg, BPF_JSET, bits); }

  // The call `nr` fails with EPERM when its argument `arg` is `value`.
  void denied_when(int nr, unsigned arg, std::uint32_t value) { denied_if(nr, arg, BPF_JEQ, value); }

  struct sock_fprog prog()
  {
    struct sock_fprog p {};
    p.len = static_cast<unsigned short>(m_n);
    p.filter = m_p.data();
    return p;
  }

private:
  // `nr` with its argument `arg` tested by `test` (BPF_JSET, BPF_JEQ) against `k`: EPERM when true.
  void denied_if(int nr, unsigned arg, std::uint16_t test, std::uint32_t k)
  {
    add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<std::uint32_t>(nr), 0, 4));
    add(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, arg_offset(arg)));
    add(BPF_JUMP(BPF_JMP | test | BPF_K, k, 0, 1));
    add(BPF_STMT(BPF_RET | BPF_K, k_deny));
    add(BPF_STMT(BPF_RET | BPF_K, k_allow));
  }

  static std::uint32_t arg_offset(unsigned arg)
  {
    return static_cast<std::uint32_t>(offsetof(struct seccomp_data, args) + arg * sizeof(std::uint64_t));
  }

  std::array<struct sock_filter, 128> m_p {};
  std::size_t m_n = 0;
};

// Every child: another ABI's calls end it; it cannot leave its process group.
void stay_in_group(Program& p)
{
  // Another ABI's numbers mean other calls (i386's int 0x80 on x86-64): none is allowed.
  p.add(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)));
  p.add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, STAGEHAND_AUDIT_ARCH, 1, 0));
  p.add(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  p.add(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)));
#if defined(__x86_64__)
  // x32's calls carry the same arch with bit 30 set in their number; -1 is no call (a tracer's
  // skipped one), as every other number the filter does not name.
  p.add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0xffffffffU, 2, 0));
  p.add(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000U, 0, 1));
  p.add(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
#endif
  p.returns(__NR_setsid, k_deny);
  p.returns(__NR_setpgid, k_deny);
  p.returns(__NR_clone3, k_nosys);
  // clone's flags are its first argument on these architectures; CLONE_PARENT is in the low word.
  p.denied_with_any(__NR_clone, 0, CLONE_PARENT);
}

// The service user's cache work refuses (EPERM)...
constexpr int k_cache_denied[] = {
  // ...a socket to pass a descriptor over;
  __NR_socket, __NR_connect,
#ifdef __NR_socketcall
  __NR_socketcall,
#endif
  // ...a way for a process of the same user to take one: it stays not dumpable (an exec would
  // make it dumpable again; prctl(PR_SET_DUMPABLE) below) and takes no other process's either;
  __NR_execve, __NR_execveat, __NR_ptrace, __NR_pidfd_getfd, __NR_process_vm_readv, __NR_process_vm_writev,
  // ...an ACL (which grants what a mode would), a device node or FIFO.
  __NR_setxattr, __NR_lsetxattr, __NR_fsetxattr, __NR_setxattrat,
#ifdef __NR_mknod
  __NR_mknod,
#endif
  __NR_mknodat};

// Calls whose arguments a filter cannot see: ENOSYS, as on a kernel without them.
constexpr int k_cache_unseen[] = {__NR_io_uring_setup, __NR_openat2};

// Calls given a mode, and which argument it is: refused with group or other write or a set-id
// bit in it (the mode itself, since a directory's default ACL overrides the umask, and only the
// mode bounds what it grants).
struct ModeArg
{
  int nr;
  unsigned arg;
};
constexpr ModeArg k_cache_modes[] = {
#ifdef __NR_chmod
  {__NR_chmod, 1},
#endif
#ifdef __NR_open
  {__NR_open, 2},
#endif
#ifdef __NR_creat
  {__NR_creat, 1},
#endif
#ifdef __NR_mkdir
  {__NR_mkdir, 1},
#endif
  {__NR_fchmod, 1}, {__NR_fchmodat, 2}, {__NR_fchmodat2, 2}, {__NR_openat, 3}, {__NR_mkdirat, 2}};

// The service user's cache work: no descriptor of its files leaves it, nothing it makes is
// writable by another user.
void keep_the_cache_in(Program& p)
{
  for (int nr : k_cache_denied) {
    p.returns(nr, k_deny);
  }
  p.denied_when(__NR_prctl, 0, PR_SET_DUMPABLE);
  for (int nr : k_cache_unseen) {
    p.returns(nr, k_nosys);
  }
  for (const auto& m : k_cache_modes) {
    p.denied_with_any(m.nr, m.arg, k_shared_bits);
  }
}

} // namespace
#endif

Status install_child_filter(ChildFilter filter)
{
#ifdef STAGEHAND_AUDIT_ARCH
  Program p;
  stay_in_group(p);
  if (filter == ChildFilter::cache_work) {
    keep_the_cache_in(p);
  }
  p.add(BPF_STMT(BPF_RET | BPF_K, k_allow));
  if (p.full()) {
    return Error::internal("the children's seccomp filter is longer than its program");
  }
  struct sock_fprog prog = p.prog();
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) {
    return Error::from_errno("cannot install the children's seccomp filter");
  }
#else
  (void)filter;
#endif
  return ok_status();
}

} // namespace stagehand
