// What a child of the daemon may do, whatever code it runs (a libarchive flaw turned into code,
// say): a seccomp filter installed after the drop to the user, inherited by whatever the child
// forks or execs and never removed.
// - Every child stays in its process group, which the daemon kills when the child ends
//   (proc::Process, Group::own): nothing it started outlives it, as the service user or as the
//   job user.
// - A child doing the cache's work as the service user also hands nothing of the cache to another
//   process and makes nothing in it that another user could write: a fill's files are the
//   service user's until the seal makes them root's, and a descriptor open for writing survives
//   that change of owner. So such a child opens no socket (SCM_RIGHTS needs one; its only socket
//   is its channel to the daemon, which takes no descriptor from it), stays not dumpable and
//   reaches into no other process (so no other child of the service user takes a descriptor of
//   its), and makes no file or directory with a group or other write bit or a set-id bit (so
//   nobody else opens one for writing through a name outside its fill), no extended attribute
//   (a POSIX ACL would grant the same), no device node or FIFO. The seal refuses the rest: a
//   name owned by another user (linked or moved in), a file with a name outside the fill
//   (cache/take_over.cpp).
#pragma once

#include "stagehand/util/result.hpp"

namespace stagehand {

enum class ChildFilter
{
  // A job user's work (its own files, as without the daemon): setsid(2), setpgid(2) and clone(2)
  // with CLONE_PARENT (a process the daemon would have to reap) fail with EPERM, clone3(2) with
  // ENOSYS (glibc then uses clone), and a system call of another architecture's ABI ends the
  // process.
  user_work,
  // The service user's cache work: all of user_work, and EPERM for socket(2) and connect(2)
  // (socketcall(2) where the architecture has it); execve(2), execveat(2), prctl(PR_SET_DUMPABLE),
  // ptrace(2), pidfd_getfd(2), process_vm_readv(2) and process_vm_writev(2); chmod(2),
  // fchmod(2), fchmodat(2), fchmodat2(2), open(2), openat(2), creat(2), mkdir(2) and mkdirat(2)
  // with a group or other write bit or a set-id bit in the mode; the set*xattr calls, mknod(2) and
  // mknodat(2). ENOSYS for io_uring_setup(2) (its operations pass no filter) and openat2(2) (its
  // mode is out of a filter's reach).
  cache_work,
};

// Whether this build has the filter: on x86-64, aarch64 and ppc64le (little-endian) it does; on
// other architectures install_child_filter() filters nothing (the group's kill at the child's end
// stays, which a process that left the group escapes; the seal still takes a fill's files over).
bool child_filter_built();

// Installs `filter` for this process and whatever it forks or execs; sets no_new_privs (needed
// without CAP_SYS_ADMIN). An error when the kernel refuses it; where child_filter_built() is
// false, ok and nothing done.
Status install_child_filter(ChildFilter filter);

} // namespace stagehand
