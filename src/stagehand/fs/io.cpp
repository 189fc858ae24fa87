// read_all / write_all / pwrite_all / splice_some over the injectable system calls.
#include "stagehand/fs/io.hpp"

#include "stagehand/util/fd.hpp"

#include <fcntl.h>
#include <unistd.h>

namespace stagehand::fs {

namespace {

ssize_t sys_read(int fd, void* buf, std::size_t len)
{
  auto& h = io_hooks();
  return h.read ? h.read(fd, buf, len) : ::read(fd, buf, len);
}

ssize_t sys_write(int fd, const void* buf, std::size_t len)
{
  auto& h = io_hooks();
  return h.write ? h.write(fd, buf, len) : ::write(fd, buf, len);
}

ssize_t sys_pwrite(int fd, const void* buf, std::size_t len, off_t off)
{
  auto& h = io_hooks();
  return h.pwrite ? h.pwrite(fd, buf, len, off) : ::pwrite(fd, buf, len, off);
}

Error failed(const char* verb, std::string_view what, int err = errno)
{
  return Error::from_errno(what.empty() ? std::string(verb) : std::string(verb) + " " + std::string(what), err);
}

} // namespace

ssize_t splice_some(int pipe_in, int out, std::size_t len)
{
  auto& h = io_hooks();
  return h.splice ? h.splice(pipe_in, out, len) : ::splice(pipe_in, nullptr, out, nullptr, len, SPLICE_F_MOVE);
}

IoHooks& io_hooks()
{
  static IoHooks hooks;
  return hooks;
}

Result<std::string> read_file(const std::string& path, std::size_t max_bytes)
{
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid()) {
    return Error::from_errno("cannot open " + path);
  }
  return read_all(fd.get(), path, max_bytes);
}

Result<std::string> read_all(int fd, const std::string& what, std::size_t max_bytes)
{
  std::string out;
  char buf[65536];
  for (;;) {
    auto n = read_some(fd, buf, sizeof buf, what);
    if (!n) {
      return n.error();
    }
    if (*n == 0) {
      return out;
    }
    if (out.size() + *n > max_bytes) {
      return Error::limit((what.empty() ? "" : what + ": ") + "larger than " + std::to_string(max_bytes) +
                          " bytes (limit)");
    }
    out.append(buf, *n);
  }
}

Result<std::size_t> read_some(int fd, char* buf, std::size_t len, const std::string& what)
{
  for (;;) {
    ssize_t n = sys_read(fd, buf, len);
    if (n >= 0) {
      return static_cast<std::size_t>(n);
    }
    if (errno != EINTR) {
      return failed("cannot read", what);
    }
  }
}

namespace {

// Writes `len` bytes with `write_at(done)` (the bytes written so far), again after EINTR and
// short writes; a write of nothing is EIO.
template<typename WriteAt> Status write_fully(std::size_t len, std::string_view what, WriteAt&& write_at)
{
  std::size_t done = 0;
  while (done < len) {
    const ssize_t n = write_at(done);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return failed("cannot write", what);
    }
    if (n == 0) {
      return failed("cannot write", what, EIO);
    }
    done += static_cast<std::size_t>(n);
  }
  return ok_status();
}

} // namespace

void end_writes(int fd)
{
  UniqueFd null(::open("/dev/null", O_WRONLY | O_CLOEXEC));
  if (null.valid()) {
    (void)::dup3(null.get(), fd, O_CLOEXEC);
  }
}

Status write_all(int fd, std::string_view data, const std::string& what)
{
  return write_fully(data.size(), what,
                     [&](std::size_t done) { return sys_write(fd, data.data() + done, data.size() - done); });
}

Status pwrite_all(int fd, const char* data, std::size_t len, std::uint64_t offset, std::string_view what)
{
  return write_fully(len, what, [&](std::size_t done) {
    return sys_pwrite(fd, data + done, len - done, static_cast<off_t>(offset + done));
  });
}

} // namespace stagehand::fs
