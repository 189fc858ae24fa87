// Where a process may change the filesystem from now on, by Landlock (an unprivileged LSM, Linux
// 5.19 and later for links and renames): beneath some directories only. A child of the service
// user that fills the cache then makes, links, renames, removes and opens for writing nothing but
// what lies beneath its fill directory: no second name outside it for a file of the fill (which
// another process of the same user could open), and no write into a file of another fill's that
// it reached through such a name. Reads are not confined.
#pragma once

#include "stagehand/util/result.hpp"

#include <span>

namespace stagehand {

enum class WritesConfined { confined, unavailable };

// Confines this thread's writes (and those of whatever it starts afterwards) to beneath `dirs`
// and to /dev/null (fs::end_writes). `unavailable` where the kernel has no Landlock, a Landlock
// older than ABI 2, or refuses it (booted without it, a seccomp filter): nothing is changed then.
// Threads started before are not confined: call it before any.
Result<WritesConfined> confine_writes(std::span<const int> dirs);

// Whether this kernel has what confine_writes needs (Landlock ABI 2 or later), whatever a
// seccomp filter allows of it: for tests.
bool writes_confinable();

} // namespace stagehand
