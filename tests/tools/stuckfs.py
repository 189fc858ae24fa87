#!/usr/bin/python3
"""stuckfs.py: a FUSE filesystem that stops answering, the way a user's broken FUSE server does.
A process whose request the server has taken and never answers sleeps in the kernel: SIGKILL
does not end it until the server answers or goes away.

  stuckfs.py MOUNT TRIGGER UID LOG    # runs in the foreground; kill it, then fusermount -u -z MOUNT

- /data/ok.txt reads "ok"; every read of /data/stuck.bin hangs (files are direct_io: a read is
  a request to this server, never served from the page cache).
- /bad holds ok.txt ("ok") and eio.bin, whose reads fail with EIO (a share's disk error mid-read).
- /out is an empty directory UID may write (any mkdir or create there is refused with EIO).
- Once the file TRIGGER exists, every request (but the mount point's own getattr) hangs.
- Each hung request appends "hung OP PATH pid PID" to LOG.

Needs root, /dev/fuse, libfuse2 and Debian's python3-fusepy (run with /usr/bin/python3).
"""
import errno
import os
import stat
import sys
import time

import fusepy
from hang_on_cue import HangOnCue

NOW = time.time()


class StuckFs(HangOnCue, fusepy.Operations):
    def __init__(self, trigger, uid, log):
        HangOnCue.__init__(self, trigger, log)
        self.uid = uid
        self.dirs = {"/": [".", "..", "data", "bad", "out"], "/data": [".", "..", "ok.txt", "stuck.bin"],
                     "/bad": [".", "..", "ok.txt", "eio.bin"], "/out": [".", ".."]}
        self.files = {"/data/ok.txt": b"ok\n", "/data/stuck.bin": b"s" * 4096, "/bad/ok.txt": b"ok\n",
                      "/bad/eio.bin": b"e" * 4096}

    def getattr(self, path, fh=None):
        base = {"st_uid": self.uid, "st_gid": 0, "st_atime": NOW, "st_mtime": NOW, "st_ctime": NOW}
        if path in self.dirs:
            mode = 0o777 if path == "/out" else 0o755
            return dict(base, st_mode=stat.S_IFDIR | mode, st_nlink=2)
        if path in self.files:
            return dict(base, st_mode=stat.S_IFREG | 0o644, st_nlink=1, st_size=len(self.files[path]))
        raise fusepy.FuseOSError(errno.ENOENT)

    def readdir(self, path, fh):
        if path not in self.dirs:
            raise fusepy.FuseOSError(errno.ENOTDIR)
        return self.dirs[path]

    def open(self, path, flags):
        if path not in self.files:
            raise fusepy.FuseOSError(errno.ENOENT)
        if flags & (os.O_WRONLY | os.O_RDWR):
            raise fusepy.FuseOSError(errno.EROFS)
        return 0

    def read(self, path, size, offset, fh):
        if path == "/data/stuck.bin":
            self.hang("read", path)
        if path == "/bad/eio.bin":
            raise fusepy.FuseOSError(errno.EIO)
        return self.files[path][offset:offset + size]

    def access(self, path, amode):
        return 0

    def statfs(self, path):
        return {"f_bsize": 4096, "f_frsize": 4096, "f_blocks": 1 << 20, "f_bfree": 1 << 20, "f_bavail": 1 << 20,
                "f_files": 1 << 20, "f_ffree": 1 << 20, "f_namemax": 255}

    def mkdir(self, path, mode):
        raise fusepy.FuseOSError(errno.EIO)

    def create(self, path, mode, fi=None):
        raise fusepy.FuseOSError(errno.EIO)


if __name__ == "__main__":
    mount, trigger, uid, log = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    fusepy.FUSE(StuckFs(trigger, uid, log), mount, foreground=True, allow_other=True, direct_io=True,
                fsname="stuckfs")
