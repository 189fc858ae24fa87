// A tar stream written by hand, so that a file's data can go into it from a pipe without passing
// through this process (tee(2)): the daemon's miss of a directory copies each file into the job's
// directory and sends the same bytes to the cache's spool in one read. The format is what
// libarchive's "restricted pax" writes: ustar headers, and a pax header before one only where
// ustar cannot hold the name, the link target or the size (then with the mtime's nanoseconds, and
// the names marked as bytes, not UTF-8: a Linux name is any bytes).
#pragma once

#include "stagehand/util/result.hpp"

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace stagehand::archive {

inline constexpr std::size_t k_tar_block = 512;

enum class TarType : char { file = '0', symlink = '2', directory = '5' };

// The header block(s) of one entry: `rel` relative, without a trailing slash; `size` only for a
// file; `link` only for a symlink. Mode (07777 of st_mode) and mtime come from `st`; owner 0.
std::string tar_header(TarType type, const std::string& rel, const struct stat& st, std::uint64_t size,
                       const std::string& link = {});

// Zeros that end a file's data of `size` bytes on a block.
std::size_t tar_padding(std::uint64_t size);

// Writes a tar stream to `out_fd` (a pipe) through a 1 MiB buffer: headers and small files' data
// are gathered, a large file's data is flushed past it by the caller (`flush()`, then the caller's
// own tee/splice into `fd()`). An error is the write failing: EPIPE when the reader is gone.
class TarStreamWriter
{
public:
  explicit TarStreamWriter(int out_fd);

  int fd() const { return m_fd; }
  Status header(TarType type, const std::string& rel, const struct stat& st, std::uint64_t size,
                const std::string& link = {});
  // Room for `n` bytes of data in the buffer (flushed first when needed; n <= capacity()); the
  // caller fills a prefix of it and says how much with commit().
  Result<std::span<char>> room(std::size_t n);
  void commit(std::size_t n) { m_used += n; }
  Status zeros(std::size_t n);
  Status flush();
  Status finish(); // the two zero blocks, and a flush
  static constexpr std::size_t capacity() { return k_buffer; }
  // With `out_fd` non-blocking: how long (ms; -1 for ever) a wait for room in the pipe may last,
  // asked before each wait. A wait that runs out is an error (ETIMEDOUT, `why_timed_out`).
  void set_patience(std::function<int()> wait_ms, std::string why_timed_out)
  {
    m_patience = std::move(wait_ms);
    m_why_timed_out = std::move(why_timed_out);
  }
  // Waits until the pipe has room (the caller's write found it full: EAGAIN).
  Status wait_writable();
  // How long this writer waited for the pipe's reader.
  std::chrono::steady_clock::duration waited() const { return m_waited; }

private:
  static constexpr std::size_t k_buffer = 1U << 20;
  Status append(const char* p, std::size_t n);

  int m_fd;
  std::string m_buf;
  std::size_t m_used = 0;
  std::chrono::steady_clock::duration m_waited{};
  std::function<int()> m_patience;
  std::string m_why_timed_out;
};

} // namespace stagehand::archive
