// stay_in_group: a classic-BPF seccomp filter of a few system calls, written out by hand (no
// libseccomp on the nodes' install list for so small a filter).
#include "stagehand/util/stay_in_group.hpp"

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>

#ifndef __NR_clone3
#define __NR_clone3 435 // the same on every architecture (Linux 5.3); headers older than that lack it
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

bool stay_in_group_filtered()
{
#ifdef STAGEHAND_AUDIT_ARCH
  return true;
#else
  return false;
#endif
}

#ifdef STAGEHAND_AUDIT_ARCH
namespace {

// The program, its jumps counted from where each lands (a jump skips the instructions between),
// in `p` (no allocation: a child forked from the daemon's threads builds it): its length.
std::size_t program(std::array<struct sock_filter, 16>& p)
{
  constexpr std::uint32_t k_deny = SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA);
  constexpr std::uint32_t k_nosys = SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA);
  std::size_t n = 0;
  auto add = [&](struct sock_filter f) { p[n++] = f; };
  // Another ABI's numbers mean other calls (i386's int 0x80 on x86-64): none is allowed.
  add(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)));
  add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, STAGEHAND_AUDIT_ARCH, 1, 0));
  add(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
  add(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)));
#if defined(__x86_64__)
  // x32's calls carry the same arch with bit 30 set in their number; -1 is no call (a tracer's
  // skipped one), as every other number the filter does not name.
  add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0xffffffffU, 2, 0));
  add(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000U, 0, 1));
  add(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS));
#endif
  // From here: 6 tests and loads, then allow (+6), deny (+7), ENOSYS (+8).
  const std::size_t at = n;
  auto to = [&](std::size_t target) { return static_cast<unsigned char>(at + target - n - 1); };
  add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_setsid, to(7), 0));
  add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_setpgid, to(7), 0));
  add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, to(8), 0));
  add(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, to(6)));
  // clone's flags are its first argument on these architectures; CLONE_PARENT is in the low word.
  add(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])));
  add(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_PARENT, to(7), to(6)));
  add(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  add(BPF_STMT(BPF_RET | BPF_K, k_deny));
  add(BPF_STMT(BPF_RET | BPF_K, k_nosys));
  return n;
}

} // namespace
#endif

Status stay_in_group()
{
#ifdef STAGEHAND_AUDIT_ARCH
  std::array<struct sock_filter, 16> filter {};
  struct sock_fprog prog {};
  prog.len = static_cast<unsigned short>(program(filter));
  prog.filter = filter.data();
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) {
    return Error::from_errno("cannot keep the process in its process group (seccomp)");
  }
#endif
  return ok_status();
}

} // namespace stagehand
