// Small fd-relative stat helpers, including the mount id used to refuse crossing mount points.
#pragma once

#include "stagehand/util/result.hpp"

#include <sys/stat.h>

#include <cstdint>

namespace stagehand::fs {

struct FileId
{
  dev_t dev = 0;
  std::uint64_t ino = 0;
  std::uint64_t mnt_id = 0; // 0 when the kernel does not report one
};

// fstat of an open fd; errors carry `what` as context.
Result<struct stat> stat_fd(int fd, const std::string& what);

// The device and mount id of an open fd (statx STATX_MNT_ID when the kernel has it).
Result<FileId> file_id(int fd, const std::string& what);

// The mount ids decide when the kernel gives them: a btrfs subvolume has its own st_dev on the same
// mount, and a bind mount of the same filesystem shares st_dev with what it covers.
inline bool same_mount(const FileId& a, const FileId& b)
{
  if (a.mnt_id != 0 && b.mnt_id != 0) {
    return a.mnt_id == b.mnt_id;
  }
  return a.dev == b.dev;
}

} // namespace stagehand::fs
