#!/usr/bin/python3
"""hangingdisk.py: a directory shown through FUSE, the way a disk that then stops answering shows it.
Until the file TRIGGER exists every request goes to ROOT as it is (as root: what root may do
there); from then on every request (but the mount point's own getattr) hangs, as a request to a
disk whose controller stopped answering does. Killing the server ends them (ENOTCONN); once the
file RESUME exists (when given) they are answered, as by a disk that came back.

  hangingdisk.py ROOT MOUNT TRIGGER LOG [RESUME]    # runs in the foreground; kill it, then fusermount -u -z MOUNT

Each hung request appends "hung OP PATH pid PID" to LOG. Files are direct_io and nothing is
cached long (entry and attribute timeouts of 0): every lookup, open and read is a request here.
Needs root, /dev/fuse, libfuse2 and Debian's python3-fusepy (run with /usr/bin/python3).
"""
import errno
import os
import sys

import fusepy
from hang_on_cue import HangOnCue


class HangingDisk(HangOnCue, fusepy.Operations):
    def __init__(self, root, trigger, log, resume=None):
        HangOnCue.__init__(self, trigger, log, resume)
        self.root = os.path.realpath(root)

    def real(self, path):
        return self.root + path

    def __call__(self, op, path, *args):
        try:
            return super().__call__(op, path, *args)
        except fusepy.FuseOSError:
            raise
        except OSError as e:  # the directory's own errors, passed on as they are
            raise fusepy.FuseOSError(e.errno or errno.EIO)

    def getattr(self, path, fh=None):
        st = os.lstat(self.real(path))
        return {k: getattr(st, k) for k in ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size",
                                            "st_atime", "st_mtime", "st_ctime")}

    def readdir(self, path, fh):
        return [".", ".."] + os.listdir(self.real(path))

    def readlink(self, path):
        return os.readlink(self.real(path))

    def access(self, path, amode):
        return 0

    def statfs(self, path):
        s = os.statvfs(self.real(path))
        return {k: getattr(s, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files",
                                           "f_ffree", "f_namemax")}

    def open(self, path, flags):
        return os.open(self.real(path), flags & ~(os.O_CREAT | os.O_EXCL) | os.O_NOFOLLOW)

    def create(self, path, mode, fi=None):
        uid, gid, _ = fusepy.fuse_get_context()
        fd = os.open(self.real(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        os.fchown(fd, uid, gid)
        return fd

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        os.truncate(self.real(path), length)

    def fsync(self, path, datasync, fh):
        os.fsync(fh)

    def flush(self, path, fh):
        return 0

    def release(self, path, fh):
        os.close(fh)

    def mkdir(self, path, mode):
        uid, gid, _ = fusepy.fuse_get_context()
        os.mkdir(self.real(path), mode)
        os.lchown(self.real(path), uid, gid)

    def rmdir(self, path):
        os.rmdir(self.real(path))

    def unlink(self, path):
        os.unlink(self.real(path))

    def rename(self, old, new):
        os.rename(self.real(old), self.real(new))

    def chmod(self, path, mode):
        os.chmod(self.real(path), mode)

    def chown(self, path, uid, gid):
        os.lchown(self.real(path), uid, gid)

    def utimens(self, path, times=None):
        os.utime(self.real(path), times, follow_symlinks=False)


if __name__ == "__main__":
    root, mount, trigger, log = sys.argv[1:5]
    resume = sys.argv[5] if len(sys.argv) > 5 else None
    fusepy.FUSE(HangingDisk(root, trigger, log, resume), mount, foreground=True, allow_other=True,
                default_permissions=True, direct_io=True, use_ino=True, entry_timeout=0, attr_timeout=0,
                fsname="hangingdisk")
