#!/usr/bin/python3
"""hangfs: a FUSE filesystem on which every lookup, getattr, open and readdir hangs, the way a
user's broken or hostile FUSE mount does. Tests mount it (as root, allow_other) inside a job's
directory to prove that no root-side code ever asks it anything.

  hangfs.py MOUNTPOINT      # stays in the foreground; kill it, then umount -l MOUNTPOINT

Needs Debian's python3-fusepy and libfuse2 (run with /usr/bin/python3), root, /dev/fuse.
"""
import errno
import sys
import threading

import fusepy


class HangFs(fusepy.Operations):
    def __init__(self):
        self.never = threading.Event()

    def _hang(self, *args, **kwargs):
        self.never.wait()
        raise fusepy.FuseOSError(errno.EIO)

    getattr = _hang
    access = _hang
    open = _hang
    opendir = _hang
    readdir = _hang
    readlink = _hang
    statfs = _hang


if __name__ == "__main__":
    fusepy.FUSE(HangFs(), sys.argv[1], foreground=True, allow_other=True, fsname="hangfs")
