// What an extraction or a copy has done so far, for a watcher elsewhere: the progress reporter's thread, or the
// daemon when these live in shared memory with the child doing the work. A source's offset says
// nothing when it is a pipe or a directory.
#pragma once

#include <atomic>
#include <cstdint>

namespace stagehand::archive {

struct WorkCounters
{
  std::atomic<std::uint64_t> bytes{0};   // file data written
  std::atomic<std::uint64_t> entries{0}; // entries read (an extraction) or files copied (a tree)
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "WorkCounters may live in shared memory");

} // namespace stagehand::archive
