// stay_in_group: a classic-BPF seccomp filter of two system calls, written out by hand (no
// libseccomp on the nodes' install list for so small a filter).
#include "stagehand/util/stay_in_group.hpp"

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cstddef>

#ifndef SECCOMP_RET_KILL_PROCESS
#define SECCOMP_RET_KILL_PROCESS SECCOMP_RET_KILL // Linux before 4.14: the thread
#endif

#if defined(__x86_64__)
#define STAGEHAND_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define STAGEHAND_AUDIT_ARCH AUDIT_ARCH_AARCH64
#elif defined(__powerpc64__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define STAGEHAND_AUDIT_ARCH AUDIT_ARCH_PPC64LE
#endif

namespace stagehand {

Status stay_in_group()
{
#ifdef STAGEHAND_AUDIT_ARCH
  struct sock_filter program[] = {
    // Another ABI's numbers mean other calls (i386's int 0x80 on x86-64): none is allowed.
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, STAGEHAND_AUDIT_ARCH, 1, 0),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
#if defined(__x86_64__)
    // x32's calls carry the same arch with bit 30 set in their number.
    BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000U, 0, 1),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
#endif
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_setsid, 1, 0),
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_setpgid, 0, 1),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog {};
  prog.len = static_cast<unsigned short>(sizeof(program) / sizeof(program[0]));
  prog.filter = program;
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) {
    return Error::from_errno("cannot keep the process in its process group (seccomp)");
  }
  return ok_status();
#else
  return Error::io("cannot keep the process in its process group: no seccomp filter for this architecture", ENOSYS);
#endif
}

} // namespace stagehand
