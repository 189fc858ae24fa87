// fstat and statx(STATX_MNT_ID) wrappers.
#include "stagehand/fs/stat.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>


#ifndef STATX_MNT_ID
#define STATX_MNT_ID 0x00001000U
#endif

namespace stagehand::fs {

Result<struct stat> stat_fd(int fd, const std::string& what)
{
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Error::from_errno(what);
  }
  return st;
}

Result<FileId> file_id(int fd, const std::string& what)
{
  struct statx sx {};
  if (::statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_INO | STATX_MNT_ID, &sx) != 0) {
    return Error::from_errno(what);
  }
  FileId id;
  id.dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
  id.ino = sx.stx_ino;
  if ((sx.stx_mask & STATX_MNT_ID) != 0) {
    id.mnt_id = sx.stx_mnt_id;
  }
  return id;
}

} // namespace stagehand::fs
