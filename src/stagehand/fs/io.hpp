// One home for reading and writing whole buffers: EINTR and short transfers handled once, and
// one seam where tests inject failures (ENOSPC, EIO, EINTR) without a root-mounted filesystem.
#pragma once

#include "stagehand/util/result.hpp"

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace stagehand::fs {

// Reads until EOF; more than `max_bytes` is a limit error. `what` names the file in errors
// ("cannot read WHAT: reason"; empty: "cannot read: reason", for a caller that names it itself).
Result<std::string> read_all(int fd, const std::string& what, std::size_t max_bytes = 64U << 20);

// The whole of the file at `path` (a file of the kernel's, /proc/stat say: never through a symlink).
Result<std::string> read_file(const std::string& path, std::size_t max_bytes);

// One read of at most `len` bytes (EINTR retried): the count read, 0 at the end of the file.
Result<std::size_t> read_some(int fd, char* buf, std::size_t len, const std::string& what);

// Ends what this process writes through `fd` (a pipe's write end) while keeping the number in
// use: /dev/null takes its place, so the reader sees the end at once and a later write goes
// nowhere. Best effort.
void end_writes(int fd);

// Writes all of `data` (retrying EINTR and short writes).
Status write_all(int fd, std::string_view data, const std::string& what);

// Writes all of `data` at `offset`.
Status pwrite_all(int fd, const char* data, std::size_t len, std::uint64_t offset, std::string_view what);

// One splice(2) of at most `len` bytes from the pipe `pipe_in` into `out`, as the system call
// answers it (a count, 0 at the end, or -1 with errno; EINTR is the caller's to retry).
ssize_t splice_some(int pipe_in, int out, std::size_t len);

// Test seam: every read/write/pwrite/splice above goes through these. A test installs a wrapper that
// fails the Nth call with ENOSPC, or returns EINTR once; reset with io_hooks() = {}.
struct IoHooks
{
  std::function<ssize_t(int, void*, std::size_t)> read;
  std::function<ssize_t(int, const void*, std::size_t)> write;
  std::function<ssize_t(int, const void*, std::size_t, off_t)> pwrite;
  std::function<ssize_t(int, int, std::size_t)> splice;
};
IoHooks& io_hooks();

} // namespace stagehand::fs
