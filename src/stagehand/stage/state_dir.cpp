#include "stagehand/stage/state_dir.hpp"

#include "stagehand/fs/atomic_file.hpp"
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
  auto lock = lock_in(d.state.get(), lock_name);
  if (!lock) {
    return lock.error();
  }
  d.lock = std::move(*lock);
  return d;
}

Result<UniqueFd> lock_in(int state_fd, const std::string& name)
{
  UniqueFd lock(::openat(state_fd, name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!lock.valid() || ::flock(lock.get(), LOCK_EX) != 0) {
    return Error::from_errno("lock");
  }
  return lock;
}

bool has_marker(int state_fd, const std::string& name) { return ::faccessat(state_fd, name.c_str(), F_OK, 0) == 0; }

void write_marker(int state_fd, const std::string& name, const std::string& text)
{
  // Replaced whole, so that a reader never sees it half written (the plugin reads a done marker
  // while a later step's reader may add to it); where that cannot be done (a full disk), written in
  // place: the marker's existence is what matters most (the job's other tasks must not stage again).
  if (fs::write_file_atomic(state_fd, name, text, 0600, fs::Durability::none)) {
    return;
  }
  UniqueFd fd(::openat(state_fd, name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (fd.valid()) {
    (void)fs::write_all(fd.get(), text, name);
  }
}

} // namespace stagehand::stage
