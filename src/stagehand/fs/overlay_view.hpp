// A read-only tree (a cache entry) shown in a job's directory as the job's own
// files: the tree, owned on disk by one uid/gid (the cache's owner), is cloned
// as an idmapped mount that shows that owner as the job's uid/gid, and is the
// lower layer of an overlay whose upper and work directories lie in a scratch
// directory of root's on the job directory's filesystem. The job then stats its
// own uid with the tree's modes, and writes, appends, chmods, deletes and adds
// in place (copy-up into the upper); the tree never changes, and each view has
// its own upper, so no job sees another's changes. Mounting and unmounting are
// O(1) in the tree's files.
//
// What the kernel requires and does (tests/unit/overlay_view_test.cpp, checked
// on Linux 6.18):
// - CAP_SYS_ADMIN in the initial user namespace, in the mount namespace where
// the view must be
//   seen, and syscalls a systemd SystemCallFilter=@system-service refuses
//   (@mount). The tree fd must come from the caller's own mount namespace:
//   open_tree(OPEN_TREE_CLONE) of an fd opened in another one (a daemon's
//   PrivateMounts=yes) fails with EINVAL. The idmap's user namespace is a
//   child's clone(CLONE_NEWUSER) whose uid_map/gid_map root writes ("tree_uid
//   job_uid 1"): ENOSPC where user.max_user_namespaces is 0, EPERM under
//   RestrictNamespaces=yes.
// - The tree's filesystem must allow idmapped mounts (ext4, xfs, btrfs
// since 5.12-5.15, tmpfs
//   since 6.3): mount_setattr(MOUNT_ATTR_IDMAP) fails with EINVAL on others
//   (seen: ramfs, sysfs, an overlay). Overlayfs takes idmapped lower layers
//   since 5.19. The upper may be tmpfs or ext4 (seen: all four pairs of
//   tmpfs/ext4 for tree and upper); it wants trusted.* xattrs.
// - Layers by fd: "lowerdir+", "upperdir", "workdir" with FSCONFIG_SET_FD
// (6.13), an O_PATH fd
//   and a still detached idmapped clone (both 6.15). Where fsconfig refuses
//   (EINVAL, EBADF) the fallback attaches the clone on scratch/lower (root's)
//   and passes "/proc/self/fd/N" strings of fds of ours (5.19+); the clone is
//   detached again once the overlay holds it. LayerPassing::attached forces
//   that path (the test mounts one view each way).
// - Options: nosuid,nodev (a set-id bit the job sets on its own file does
// nothing; mknod is EPERM
//   anyway), volatile (no syncs: the upper dies with the job), redirect_dir=on
//   (a job renames a staged directory; off gives EXDEV), metacopy=on (chmod of
//   a large file copies no data), index=off. Redirects and metacopy trust the
//   upper's xattrs: the upper must stay root's only.
// - The job sees its own uid/gid and the tree's on-disk modes; entries of the
// tree with another
//   owner show as 65534 (chmod: EOVERFLOW; read/write by the "other" bits).
//   Copy-up writes the upper as the job's uid/gid with the lower's mode (quota:
//   the job user's). A 0444 file refuses open(O_WRONLY) with EACCES until the
//   job chmods it, as its own would: to show "the archive's modes" the cache
//   must keep them (today's 0444/0555 files and 0555 directories would show
//   so).
// - Hard links: two names, one inode and st_nlink 2, until one is written:
// copy-up splits them
//   (index=off), the other name keeps the old content.
// - The tree is never written (the clone is read-only, overlayfs never writes a
// lower layer);
//   each view has its own upper, so no job sees another's changes.
// - /proc/self/mountinfo shows every user the view: "overlay ...
// lowerdir+=/,upperdir=<scratch
//   path>/upper,workdir=<scratch path>/work" (the fallback:
//   "lowerdir=/proc/self/fd/N"). The cache's path does not appear.
// - The target must be unmounted (MNT_DETACH) before its directory is removed;
// the upper's
//   files belong to the job user, in root's scratch directory, which the caller
//   removes.
#pragma once

#include "stagehand/util/fd.hpp"
#include "stagehand/util/result.hpp"

#include <sys/types.h>

#include <string>

namespace stagehand::fs {

// How the layers reach overlayfs: `by_fd` (6.15+, the clone stays detached) or
// `attached` (5.19+); `automatic` tries the first and, where fsconfig refuses
// it, the second.
enum class LayerPassing { automatic, by_fd, attached };

struct OverlayViewRequest
{
  int tree_fd = -1;   // the read-only tree (O_PATH is enough): the overlay's lower layer
  uid_t tree_uid = 0; // its owner on disk, shown as job_uid
  gid_t tree_gid = 0; // its group on disk, shown as job_gid
  uid_t job_uid = 0;
  gid_t job_gid = 0;
  int target_parent_fd = -1; // the directory holding the empty directory to mount on
  std::string target_name;   // one path component, an empty directory, not a mount point
  int scratch_fd = -1;       // root's own empty directory (0700) for upper/ and work/, on the
                             // filesystem the job's writes should go to (the job directory's)
  LayerPassing passing = LayerPassing::automatic;
};

// Mounts the view on target_parent_fd/target_name. The root of the view is the
// job's (mode of the tree's root plus u+rwx). Errors name the step and the
// kernel's reason (fsconfig's log).
Status mount_overlay_view(const OverlayViewRequest& request);

// Detaches (MNT_DETACH) the overlay mounted on parent_fd/name, reached by a
// walk that follows no symlink; an error if what is there is no overlay's root.
// The directory below is then empty.
Status unmount_overlay_view(int parent_fd, const std::string& name);

enum class Availability { available, unavailable };

struct ProbeResult
{
  Availability availability = Availability::unavailable;
  std::string reason; // "idmapped overlay not supported: ..." when unavailable
};

// Whether this kernel can show a tree of the filesystem of `tree_dir_fd` (any
// directory there: the cache's) through an idmapped overlay with its upper in
// `scratch_fd`'s filesystem: mounts one view of tree_dir_fd (nothing written
// there) on a directory made in scratch_fd, then unmounts it and removes what
// it made. Unavailable on ENOSYS, EINVAL, EPERM, EOPNOTSUPP, ENOSPC, ENODEV (no
// overlay module); other failures are errors.
Result<ProbeResult> probe_overlay_view(int tree_dir_fd, int scratch_fd);

} // namespace stagehand::fs
