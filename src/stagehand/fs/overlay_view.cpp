// An idmapped overlay view of a read-only tree, through the new mount API, fd-relative.
#include "stagehand/fs/overlay_view.hpp"

#include "stagehand/fs/remove_tree.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace stagehand::fs {

namespace {

// The new mount API through syscall(2): glibc 2.36's <sys/mount.h> clashes with <linux/mount.h>,
// and older glibc has no wrappers.
int open_tree(int dfd, const char* path, unsigned flags)
{
  return static_cast<int>(::syscall(SYS_open_tree, dfd, path, flags));
}
int mount_setattr(int dfd, const char* path, unsigned flags, struct mount_attr* attr)
{
  return static_cast<int>(::syscall(SYS_mount_setattr, dfd, path, flags, attr, sizeof *attr));
}
int fsopen(const char* fs, unsigned flags) { return static_cast<int>(::syscall(SYS_fsopen, fs, flags)); }
int fsconfig(int fd, unsigned cmd, const char* key, const void* value, int aux)
{
  return static_cast<int>(::syscall(SYS_fsconfig, fd, cmd, key, value, aux));
}
int fsmount(int fd, unsigned flags, unsigned attrs)
{
  return static_cast<int>(::syscall(SYS_fsmount, fd, flags, attrs));
}
int move_mount(int from_dfd, const char* from, int to_dfd, const char* to, unsigned flags)
{
  return static_cast<int>(::syscall(SYS_move_mount, from_dfd, from, to_dfd, to, flags));
}
constexpr int k_mnt_detach = 2; // MNT_DETACH of <sys/mount.h>
int detach(int fd)
{
  const std::string via = "/proc/self/fd/" + std::to_string(fd);
  return static_cast<int>(::syscall(SYS_umount2, via.c_str(), k_mnt_detach));
}

bool one_component(const std::string& name)
{
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

// `name` in `parent_fd`, following no symlink; `same_mount` refuses to step onto a mount.
Result<UniqueFd> open_below(int parent_fd, const std::string& name, bool same_mount)
{
  struct open_how how {};
  how.flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | (same_mount ? RESOLVE_NO_XDEV : 0);
  long fd = ::syscall(SYS_openat2, parent_fd, name.c_str(), &how, sizeof how);
  if (fd < 0) {
    const int err = errno;
    return Error::from_errno(err == EXDEV ? name + " is a mount point already" : name, err);
  }
  return UniqueFd(static_cast<int>(fd));
}

Result<bool> is_empty_dir(int dir_fd)
{
  int fd = ::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return Error::from_errno("cannot list the mount point");
  }
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    const int err = errno;
    ::close(fd);
    return Error::from_errno("cannot list the mount point", err);
  }
  bool empty = true;
  while (struct dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") {
      empty = false;
      break;
    }
  }
  ::closedir(d);
  return empty;
}

// A user namespace that maps uid `from_uid` to `to_uid` and gid `from_gid` to `to_gid`, nothing
// else: made by a child that only waits (clone(CLONE_NEWUSER), no glibc fork handlers, so it is
// safe in a threaded process), whose maps root writes; its /proc/PID/ns/user is opened before the
// child is released and reaped.
Result<UniqueFd> idmap_namespace(uid_t from_uid, gid_t from_gid, uid_t to_uid, gid_t to_gid)
{
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    return Error::from_errno("idmap: pipe");
  }
  UniqueFd rd(p[0]);
  UniqueFd wr(p[1]);
  const long pid = ::syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
  if (pid < 0) {
    return Error::from_errno("idmap: cannot make a user namespace");
  }
  if (pid == 0) {
    ::close(p[1]);
    char c;
    while (::read(p[0], &c, 1) < 0 && errno == EINTR) {}
    ::_exit(0);
  }
  rd.reset();
  auto finish = [&](bool kill_it) {
    if (kill_it) {
      ::kill(static_cast<pid_t>(pid), SIGKILL);
    }
    wr.reset();
    int status = 0;
    while (::waitpid(static_cast<pid_t>(pid), &status, 0) < 0 && errno == EINTR) {}
  };
  const std::string proc = "/proc/" + std::to_string(pid);
  UniqueFd dir(::open(proc.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!dir.valid()) {
    const int err = errno;
    finish(true);
    return Error::from_errno("idmap: " + proc, err);
  }
  auto write_map = [&](const char* file, unsigned long from, unsigned long to) -> Status {
    UniqueFd fd(::openat(dir.get(), file, O_WRONLY | O_CLOEXEC));
    const std::string line = std::to_string(from) + " " + std::to_string(to) + " 1\n";
    if (!fd.valid() || ::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      return Error::from_errno(std::string("idmap: cannot write ") + file);
    }
    return ok_status();
  };
  if (auto st = write_map("uid_map", from_uid, to_uid); !st) {
    finish(true);
    return st.error();
  }
  if (auto st = write_map("gid_map", from_gid, to_gid); !st) {
    finish(true);
    return st.error();
  }
  UniqueFd ns(::openat(dir.get(), "ns/user", O_RDONLY | O_CLOEXEC));
  const int err = errno;
  finish(!ns.valid());
  if (!ns.valid()) {
    return Error::from_errno("idmap: cannot open the user namespace", err);
  }
  return ns;
}

// The messages overlayfs left in the fs context's log ("e overlay: ..."), joined.
std::string context_log(int fs_fd)
{
  std::string out;
  char buf[1024];
  for (;;) {
    ssize_t n = ::read(fs_fd, buf, sizeof buf);
    if (n <= 0) {
      break;
    }
    std::string line(buf, static_cast<std::size_t>(n));
    while (!line.empty() && line.back() == '\n') {
      line.pop_back();
    }
    out += (out.empty() ? "" : "; ") + line;
  }
  return out;
}

Error fs_error(int fs_fd, const std::string& what, int err)
{
  const std::string log = context_log(fs_fd);
  Error e = Error::from_errno(what, err);
  if (!log.empty()) {
    e.message += " (" + log + ")";
  }
  return e;
}

// An overlay over the (idmapped) tree, not yet attached anywhere: its mount fd.
Result<UniqueFd> make_overlay(int tree_mnt_fd, int upper_fd, int work_fd, LayerPassing passing)
{
  UniqueFd fs(fsopen("overlay", FSOPEN_CLOEXEC));
  if (!fs.valid()) {
    return Error::from_errno("overlay: fsopen");
  }
  auto set_string = [&](const char* key, const std::string& value) -> Status {
    if (fsconfig(fs.get(), FSCONFIG_SET_STRING, key, value.c_str(), 0) != 0) {
      return fs_error(fs.get(), std::string("overlay: ") + key + "=" + value, errno);
    }
    return ok_status();
  };
  auto set_fd = [&](const char* key, int fd) -> Status {
    if (fsconfig(fs.get(), FSCONFIG_SET_FD, key, nullptr, fd) != 0) {
      return fs_error(fs.get(), std::string("overlay: ") + key + " by fd", errno);
    }
    return ok_status();
  };
  auto proc_path = [](int fd) { return "/proc/self/fd/" + std::to_string(fd); };
  Status layers = ok_status();
  if (passing == LayerPassing::by_fd) {
    layers = set_fd("lowerdir+", tree_mnt_fd);
    if (layers) {
      layers = set_fd("upperdir", upper_fd);
    }
    if (layers) {
      layers = set_fd("workdir", work_fd);
    }
  } else {
    layers = set_string("lowerdir", proc_path(tree_mnt_fd));
    if (layers) {
      layers = set_string("upperdir", proc_path(upper_fd));
    }
    if (layers) {
      layers = set_string("workdir", proc_path(work_fd));
    }
  }
  if (!layers) {
    return layers.error();
  }
  // No syncs (the upper dies with the job); renames of directories and metadata-only copy-up
  // (chmod of a large file copies no data) through xattrs in root's upper, which no user reaches.
  if (fsconfig(fs.get(), FSCONFIG_SET_FLAG, "volatile", nullptr, 0) != 0) {
    return fs_error(fs.get(), "overlay: volatile", errno);
  }
  for (const char* kv : {"redirect_dir=on", "metacopy=on", "index=off"}) {
    const std::string s = kv;
    const auto eq = s.find('=');
    if (auto st = set_string(s.substr(0, eq).c_str(), s.substr(eq + 1)); !st) {
      return st.error();
    }
  }
  if (fsconfig(fs.get(), FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) != 0) {
    return fs_error(fs.get(), "overlay: cannot create", errno);
  }
  UniqueFd mnt(fsmount(fs.get(), FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV));
  if (!mnt.valid()) {
    return fs_error(fs.get(), "overlay: fsmount", errno);
  }
  return mnt;
}

Result<UniqueFd> make_owned_dir(int parent_fd, const char* name, uid_t uid, gid_t gid, mode_t mode)
{
  if (::mkdirat(parent_fd, name, 0700) != 0) {
    return Error::from_errno(std::string("scratch directory: cannot make ") + name);
  }
  UniqueFd fd(::openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd.valid() || ::fchown(fd.get(), uid, gid) != 0 || ::fchmod(fd.get(), mode) != 0) {
    return Error::from_errno(std::string("scratch directory: ") + name);
  }
  return fd;
}

// The mount point `r.target_name`: one name in its directory, not a mount point already, empty.
Result<UniqueFd> open_empty_target(const OverlayViewRequest& r)
{
  auto target = open_below(r.target_parent_fd, r.target_name, true);
  if (!target) {
    return target.error().with_context("overlay view");
  }
  auto empty = is_empty_dir(target->get());
  if (!empty) {
    return empty.error().with_context("overlay view");
  }
  if (!*empty) {
    return Error::refused("overlay view: " + r.target_name + " is not empty", ENOTEMPTY);
  }
  return target;
}

// A clone of the tree, read-only, its owner shown as the job user (the tree's uid and gid mapped
// to the job's), not attached anywhere.
Result<UniqueFd> idmapped_clone(const OverlayViewRequest& r)
{
  auto ns = idmap_namespace(r.tree_uid, r.tree_gid, r.job_uid, r.job_gid);
  if (!ns) {
    return ns.error().with_context("overlay view");
  }
  UniqueFd clone(open_tree(r.tree_fd, "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH));
  if (!clone.valid()) {
    return Error::from_errno("overlay view: open_tree(OPEN_TREE_CLONE)");
  }
  struct mount_attr attr {};
  attr.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  attr.userns_fd = static_cast<__u64>(ns->get());
  if (mount_setattr(clone.get(), "", AT_EMPTY_PATH, &attr) != 0) {
    return Error::from_errno("overlay view: idmapped mount of the tree (mount_setattr)");
  }
  ns->reset();
  return clone;
}

// The overlay's own directories, in root's scratch directory: the upper and the work directory.
struct OverlayDirs
{
  int upper_fd;
  int work_fd;
};

// Makes the overlay of `clone` and mounts it on `target_fd`: its layers by fd where the kernel
// takes them, else (or as `r.passing` says) through the clone attached in the scratch directory
// for as long as it takes to make it.
Status mount_overlay(const OverlayViewRequest& r, int target_fd, const OverlayDirs& dirs, UniqueFd clone)
{
  Result<UniqueFd> overlay = Error::internal("overlay view: no attempt");
  if (r.passing != LayerPassing::attached) {
    overlay = make_overlay(clone.get(), dirs.upper_fd, dirs.work_fd, LayerPassing::by_fd);
    // EINVAL: no "lowerdir+" by fd (< 6.13) or no detached layer (< 6.15); EBADF: no O_PATH fd.
    const bool older_kernel = !overlay && (overlay.error().code == EINVAL || overlay.error().code == EBADF);
    if (!overlay && (r.passing == LayerPassing::by_fd || !older_kernel)) {
      return overlay.error().with_context("overlay view");
    }
  }
  bool attached = false;
  if (!overlay) {
    // Older kernels take neither layers by fd nor a detached mount as a layer: attach the clone
    // in root's scratch directory for as long as it takes to make the overlay.
    auto at = make_owned_dir(r.scratch_fd, "lower", 0, 0, 0700);
    if (!at) {
      return at.error().with_context("overlay view");
    }
    if (move_mount(clone.get(), "", at->get(), "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0) {
      return Error::from_errno("overlay view: cannot attach the idmapped tree");
    }
    attached = true;
    overlay = make_overlay(clone.get(), dirs.upper_fd, dirs.work_fd, LayerPassing::attached);
  }
  Status result = ok_status();
  if (!overlay) {
    result = overlay.error().with_context("overlay view");
  } else if (move_mount(overlay->get(), "", target_fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0) {
    result = Error::from_errno("overlay view: cannot mount on " + r.target_name);
  }
  if (attached) {
    // The overlay holds a private clone of its layers: the attachment is no longer needed.
    if (detach(clone.get()) != 0 && result) {
      result = Error::from_errno("overlay view: cannot detach the idmapped tree from the scratch directory");
    }
    clone.reset();
    (void)::unlinkat(r.scratch_fd, "lower", AT_REMOVEDIR);
  }
  return result;
}

} // namespace

Status mount_overlay_view(const OverlayViewRequest& r)
{
  if (!one_component(r.target_name)) {
    return Error::refused("overlay view: the mount point must be one name in its directory: " + r.target_name, EINVAL);
  }
  struct stat tree {};
  if (::fstat(r.tree_fd, &tree) != 0 || !S_ISDIR(tree.st_mode)) {
    return Error::refused("overlay view: the tree is not a directory", ENOTDIR);
  }
  auto target = open_empty_target(r);
  if (!target) {
    return target.error();
  }
  // The merged root is the upper's root: the job's, with the tree root's mode plus u+rwx.
  const mode_t root_mode = (tree.st_mode & 01777) | S_IRWXU;
  auto upper = make_owned_dir(r.scratch_fd, "upper", r.job_uid, r.job_gid, root_mode);
  if (!upper) {
    return upper.error().with_context("overlay view");
  }
  auto work = make_owned_dir(r.scratch_fd, "work", 0, 0, 0700);
  if (!work) {
    return work.error().with_context("overlay view");
  }
  auto clone = idmapped_clone(r);
  if (!clone) {
    return clone.error();
  }
  return mount_overlay(r, target->get(), OverlayDirs{upper->get(), work->get()}, std::move(*clone));
}

Status unmount_overlay_view(int parent_fd, const std::string& name)
{
  if (!one_component(name)) {
    return Error::refused("overlay view: the mount point must be one name in its directory: " + name, EINVAL);
  }
  auto fd = open_below(parent_fd, name, false);
  if (!fd) {
    return fd.error().with_context("overlay view");
  }
  struct statx stx {};
  if (::statx(fd->get(), "", AT_EMPTY_PATH | AT_STATX_DONT_SYNC, STATX_TYPE, &stx) != 0) {
    return Error::from_errno("overlay view: " + name);
  }
  struct statfs sfs {};
  if ((stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) != 0 && (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT) == 0) {
    return Error::refused("overlay view: nothing is mounted on " + name, EINVAL);
  }
  if (::fstatfs(fd->get(), &sfs) != 0) {
    return Error::from_errno("overlay view: " + name);
  }
  if (sfs.f_type != OVERLAYFS_SUPER_MAGIC) {
    return Error::refused("overlay view: what is mounted on " + name + " is no overlay", EINVAL);
  }
  if (detach(fd->get()) != 0) {
    return Error::from_errno("overlay view: cannot unmount " + name);
  }
  return ok_status();
}

Result<ProbeResult> probe_overlay_view(int tree_dir_fd, int scratch_fd)
{
  const std::string name = ".overlay-probe." + std::to_string(::getpid());
  if (::mkdirat(scratch_fd, name.c_str(), 0700) != 0) {
    return Error::from_errno("overlay probe: cannot make " + name);
  }
  UniqueFd dir(::openat(scratch_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st {};
  Status done = ok_status();
  if (!dir.valid() || ::fstat(tree_dir_fd, &st) != 0 || ::mkdirat(dir.get(), "s", 0700) != 0 ||
      ::mkdirat(dir.get(), "m", 0700) != 0) {
    done = Error::from_errno("overlay probe");
  }
  UniqueFd scratch(dir.valid() ? ::openat(dir.get(), "s", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1);
  if (done && scratch.valid()) {
    OverlayViewRequest req;
    req.tree_fd = tree_dir_fd;
    req.tree_uid = st.st_uid;
    req.tree_gid = st.st_gid;
    req.job_uid = 65534;
    req.job_gid = 65534;
    req.target_parent_fd = dir.get();
    req.target_name = "m";
    req.scratch_fd = scratch.get();
    done = mount_overlay_view(req);
    if (done) {
      done = unmount_overlay_view(dir.get(), "m");
    }
  }
  scratch.reset();
  dir.reset();
  auto removed = remove_tree(scratch_fd, name);
  if (!done) {
    switch (done.error().code) {
    case ENOSYS:
    case EINVAL:
    case EPERM:
    case EOPNOTSUPP:
    case ENOSPC:
    case ENODEV:
      return ProbeResult{Availability::unavailable, "idmapped overlay not supported: " + done.error().message};
    default:
      return done.error().with_context("overlay probe");
    }
  }
  if (!removed) {
    return removed.error().with_context("overlay probe");
  }
  return ProbeResult{Availability::available, ""};
}

} // namespace stagehand::fs
