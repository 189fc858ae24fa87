// A descriptor's offset without waiting for a read under way on it.
#pragma once

#include <cstdint>

namespace stagehand::fs {

// The offset of `fd`'s open file, as /proc/self/fdinfo shows it (lseek(SEEK_CUR) where /proc is
// not there). Progress is measured this way because lseek waits for a read under way on the same
// open file, in this process or another sharing it (the kernel's position lock): a read stalled
// on a shared filesystem would hold whoever asks, and with it progress lines, keepalives and the
// record `stagehand status` shows. 0 when it cannot be told.
std::uint64_t file_offset(int fd);

} // namespace stagehand::fs
