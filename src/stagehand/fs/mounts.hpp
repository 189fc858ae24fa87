// Mounts a user left below a root-owned directory: found in /proc/self/mountinfo, each reached
// through a directory fd beneath that directory (never by a path string alone), and detached
// through that fd. Nothing mounted there is ever asked anything (no stat, no open of its files).
#pragma once

#include "stagehand/util/result.hpp"

#include <cstdint>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace stagehand::fs {

struct MountEntry
{
  std::uint64_t id = 0;
  std::uint64_t parent = 0;
  std::string point; // the mount point as this process sees it, octal escapes undone
};

// The lines of a /proc/PID/mountinfo text (lines that do not parse are left out).
std::vector<MountEntry> parse_mountinfo(std::string_view text);

// The mount id of what `fd` refers to (an O_PATH fd is fine), from /proc/self/fdinfo: the
// kernel's own bookkeeping, so a hung filesystem is never asked.
Result<std::uint64_t> mount_id_of(int fd);

// The entries of the directory `base_fd` that have something mounted on them or below them,
// from mountinfo's paths (a hint for which entries to look at: detach_mounts_below decides).
Result<std::set<std::string>> entries_with_mounts(int base_fd);

// Detaches (umount2 MNT_DETACH, through an O_PATH fd of the mount's root) every mount whose mount
// point is `name` in `base_fd` or lies below it, and mounts stacked on those. Only mounts whose
// mount point is strictly below the base: each is reached from `base_fd` by a walk that crosses no
// mount and follows no symlink up to its mount point's parent, then by one step onto the mount,
// whose id is then compared with mountinfo's. Returns the mount points detached (relative to the
// base, for the log); a mount that cannot be detached is an error naming it (EPERM without
// CAP_SYS_ADMIN).
Result<std::vector<std::string>> detach_mounts_below(int base_fd, const std::string& name);

} // namespace stagehand::fs
