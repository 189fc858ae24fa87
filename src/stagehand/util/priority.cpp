#include "stagehand/util/priority.hpp"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace stagehand {

namespace {

id_t this_thread() { return static_cast<id_t>(::syscall(SYS_gettid)); }

} // namespace

bool set_thread_nice(int nice) { return ::setpriority(PRIO_PROCESS, this_thread(), nice) == 0; }

int thread_nice()
{
  errno = 0;
  return ::getpriority(PRIO_PROCESS, this_thread());
}

} // namespace stagehand
