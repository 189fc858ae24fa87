#include "stagehand/stage/state_dir.hpp"

#include "stagehand/fs/io.hpp"
#include "stagehand/stage/request.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace stagehand::stage {

Result<LockedStateDir> lock_state_dir(const std::string& tmpdir_path, const std::string& lock_name)
{
  LockedStateDir d;
  d.root = UniqueFd(::open(tmpdir_path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!d.root.valid()) {
    return Error::from_errno("no scratch directory " + tmpdir_path);
  }
  if (::mkdirat(d.root.get(), k_state_dir, 0700) != 0 && errno != EEXIST) {
    return Error::from_errno(std::string(k_state_dir));
  }
  d.state = UniqueFd(::openat(d.root.get(), k_state_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!d.state.valid()) {
    return Error::from_errno(std::string(k_state_dir));
  }
  d.lock = UniqueFd(::openat(d.state.get(), lock_name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!d.lock.valid() || ::flock(d.lock.get(), LOCK_EX) != 0) {
    return Error::from_errno("lock");
  }
  return d;
}

bool has_marker(int state_fd, const std::string& name) { return ::faccessat(state_fd, name.c_str(), F_OK, 0) == 0; }

void write_marker(int state_fd, const std::string& name, const std::string& text)
{
  UniqueFd fd(::openat(state_fd, name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.valid()) {
    (void)fs::write_all(fd.get(), text, name);
  }
}

} // namespace stagehand::stage
