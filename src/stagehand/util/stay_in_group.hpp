// A process that cannot leave its process group: what a child of the daemon forks stays where
// the daemon's kill of that group reaches it (proc::Process, Group::own), so nothing a child
// started (a libarchive flaw turned into code, say) outlives it, as the service user or as the
// job user, with a descriptor into a cache fill or anything else the child held.
#pragma once

#include "stagehand/util/result.hpp"

namespace stagehand {

// From now on setsid(2) and setpgid(2) fail with EPERM for this process and whatever it forks or
// execs (a seccomp filter, inherited and never removed); a system call of another architecture's
// ABI ends the process. Sets no_new_privs (needed without CAP_SYS_ADMIN). An error when the kernel
// refuses the filter; on an architecture this file does not know, nothing is filtered and the
// result says so (ENOSYS).
Status stay_in_group();

} // namespace stagehand
