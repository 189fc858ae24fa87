"""hang_on_cue: what this directory's FUSE servers that stop answering share (stuckfs.py,
hangingdisk.py). Once the file TRIGGER exists every request (but the mount point's own getattr)
waits forever, as a request to a server or a disk that stopped answering does, and appends
"hung OP PATH pid PID" to LOG. With RESUME (optional): once that file exists, requests are
answered again, the held ones too, as a disk that came back answers them (each then logs "resumed
OP PATH"). Mixed in before fusepy.Operations."""
import errno
import os
import threading

import fusepy


class HangOnCue:
    def __init__(self, trigger, log, resume=None):
        self.trigger = trigger
        self.log = log
        self.resume = resume
        self.never = threading.Event()
        self.log_lock = threading.Lock()  # (not "lock": fusepy.Operations has a lock operation)

    def resumed(self):
        return self.resume is not None and os.path.exists(self.resume)

    def note(self, line):
        with self.log_lock, open(self.log, "a") as f:
            f.write(line + "\n")

    def hang(self, op, path):
        _, _, pid = fusepy.fuse_get_context()
        self.note("hung %s %s pid %d" % (op, path, pid))
        if self.resume is None:
            self.never.wait()
            raise fusepy.FuseOSError(errno.EIO)
        while not self.resumed():
            self.never.wait(0.1)
        self.note("resumed %s %s" % (op, path))

    def __call__(self, op, path, *args):
        if os.path.exists(self.trigger) and not self.resumed() and not (op == "getattr" and path == "/"):
            self.hang(op, path)
        return super().__call__(op, path, *args)
