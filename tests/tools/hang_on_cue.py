"""hang_on_cue: what this directory's FUSE servers that stop answering share (stuckfs.py,
hangingdisk.py). Once the file TRIGGER exists every request (but the mount point's own getattr)
waits forever, as a request to a server or a disk that stopped answering does, and appends
"hung OP PATH pid PID" to LOG. Mixed in before fusepy.Operations."""
import errno
import os
import threading

import fusepy


class HangOnCue:
    def __init__(self, trigger, log):
        self.trigger = trigger
        self.log = log
        self.never = threading.Event()
        self.log_lock = threading.Lock()  # (not "lock": fusepy.Operations has a lock operation)

    def hang(self, op, path):
        _, _, pid = fusepy.fuse_get_context()
        with self.log_lock, open(self.log, "a") as f:
            f.write("hung %s %s pid %d\n" % (op, path, pid))
        self.never.wait()
        raise fusepy.FuseOSError(errno.EIO)

    def __call__(self, op, path, *args):
        if os.path.exists(self.trigger) and not (op == "getattr" and path == "/"):
            self.hang(op, path)
        return super().__call__(op, path, *args)
