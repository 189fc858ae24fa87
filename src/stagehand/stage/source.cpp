// open_source: one open, every decision on the descriptor.
#include "stagehand/stage/source.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

namespace stagehand::stage {

bool path_under(const std::string& path, const std::string& root)
{
  std::string r = root;
  while (r.size() > 1 && r.back() == '/') {
    r.pop_back();
  }
  return path == r || (path.size() > r.size() && path.compare(0, r.size(), r) == 0 && (r == "/" || path[r.size()] == '/'));
}

Result<OpenedSource> open_source(const std::string& path, std::optional<SourceKind> expected,
                                 const std::vector<std::string>& allowed_roots)
{
  OpenedSource out;
  out.fd.reset(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC));
  if (!out.fd.valid()) {
    const int err = errno;
    switch (err) {
    case ENOENT:
      return Error::refused("no such file or directory", err);
    case EACCES:
      return Error::refused("permission denied", err);
    case ELOOP:
      return Error::refused("is a symlink now, not what was checked: refused", err);
    default:
      return Error::refused(std::strerror(err), err);
    }
  }
  if (::fstat(out.fd.get(), &out.st) != 0) {
    return Error::from_errno("cannot stat");
  }
  const mode_t type = out.st.st_mode & S_IFMT;
  if (type == S_IFIFO || type == S_IFCHR || type == S_IFBLK || type == S_IFSOCK) {
    return Error::refused("is a FIFO, device or socket, not a file or directory: refused", EINVAL);
  }
  if (type != S_IFREG && type != S_IFDIR) {
    return Error::refused("not a regular file or directory", EINVAL);
  }
  if (expected && out.is_dir() != (*expected == SourceKind::dir)) {
    return Error::refused(std::string("changed from ") + (out.is_dir() ? "a file to a directory" : "a directory to a file") +
                            " since submission",
                          EINVAL);
  }
  if (!allowed_roots.empty()) {
    char real[4096];
    const std::string link = "/proc/self/fd/" + std::to_string(out.fd.get());
    ssize_t n = ::readlink(link.c_str(), real, sizeof real - 1);
    if (n <= 0) {
      return Error::from_errno("cannot tell where it lies");
    }
    const std::string where(real, static_cast<std::size_t>(n));
    bool ok = false;
    for (const auto& root : allowed_roots) {
      ok = ok || path_under(where, root);
    }
    if (!ok) {
      return Error::refused(where + " is not under [stage] allowed_roots", EPERM);
    }
  }
  int flags = ::fcntl(out.fd.get(), F_GETFL);
  if (flags >= 0) {
    ::fcntl(out.fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  }
  return out;
}

} // namespace stagehand::stage
