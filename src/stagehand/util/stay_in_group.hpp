// A process that cannot leave its process group: what a child of the daemon forks stays where
// the daemon's kill of that group reaches it (proc::Process, Group::own), so that no process a
// child started (a libarchive flaw turned into code, say) outlives it, as the service user or as
// the job user.
#pragma once

#include "stagehand/util/result.hpp"

namespace stagehand {

// Whether this build has the filter: on x86-64, aarch64 and ppc64le (little-endian) it does; on
// other architectures stay_in_group() filters nothing (the group's kill at the child's end
// stays, which a process that left the group escapes).
bool stay_in_group_filtered();

// From now on, for this process and whatever it forks or execs (a seccomp filter, inherited and
// never removed): setsid(2), setpgid(2) and a clone(2) with CLONE_PARENT (a process the daemon
// would have to reap) fail with EPERM, clone3(2) with ENOSYS (glibc then uses clone), and a system
// call of another architecture's ABI ends the process. Sets no_new_privs (needed without
// CAP_SYS_ADMIN). An error when the kernel refuses the filter; where stay_in_group_filtered() is
// false, ok and nothing done.
Status stay_in_group();

} // namespace stagehand
