#!/usr/bin/python3
"""sharedfs.py: the test suites' stand-in for a cluster's shared filesystem (NFS, Lustre, ...).

Serves the directory SRC read-only at MOUNT through FUSE, so that the tests can see and shape
every read that staging makes from "the shared filesystem":

  sharedfs.py SRC MOUNT [--mbps N] [--open-latency-ms N] [--hold-opens PATH]
              [--hold-reads PATH [--hold-reads-from BYTES]] [--nonempty]   # runs in the foreground

- Every byte goes through this process: files are opened with direct_io (no page cache), so a
  second read of the same file is counted, and slowed, again. (A splice() read still goes through
  the page cache on recent kernels, and every open, without keep_cache, drops a file's cached
  pages: another process opening a file while it is spliced makes the reader fetch again what it
  had read ahead, counted twice.)
- Bytes read and opens are counted in total, per file and per reading process, and published as
  JSON in the virtual file MOUNT/.sharedfs-stats:
    bytes_read  int   bytes delivered from all files since the mount
    opens       int   successful opens of files (the stats file not included)
    files       {path: bytes delivered}, path as seen under MOUNT with a leading "/"
    file_opens  {path: opens}
    readers     {pid: {"comm", "uid", "bytes_read", "opens"}}, the processes that read
  The stats file is a snapshot taken when it is opened.
- --mbps N: all readers together get N MB/s (10^6 bytes), from one token bucket (0: unlimited).
  --open-latency-ms N: every open of a file waits N ms first, as a round trip to a server would.
- Holds, for tests that must catch a staging in the act whatever the machine's load: while the
  file PATH (outside the mount) exists, --hold-opens PATH makes every open of a file wait, and
  --hold-reads PATH every read through an open file that has delivered BYTES already (default
  1 MiB: checks that read a file's first and last blocks get through, a copy waits after its
  first MiB). A held read may hold other readers of the same file too (its pages in the kernel's
  cache stay locked): hold a file only one job reads. The test creates PATH, waits for what it
  wants to see, then removes PATH and everything held goes on. The stats file is never held.
- Permissions are checked by the kernel against SRC's owners and modes (default_permissions)
  for every user (allow_other): a user reads through MOUNT exactly what they could read in SRC.

Stop it with `fusermount -u MOUNT`, SIGINT or SIGTERM. Needs root (or a fuse.conf allowing
allow_other), /dev/fuse, libfuse2 and fusepy (Debian: fuse libfuse2 python3-fusepy; run it with
/usr/bin/python3, whose packages those are).
"""
import argparse
import errno
import json
import os
import sys
import threading
import time

try:  # Debian's python3-fusepy installs the module as `fusepy`; pip's fusepy as `fuse`
    import fusepy as fuse
except ImportError:
    try:
        import fuse
    except ImportError:
        fuse = None
    if not hasattr(fuse, "FUSE"):  # absent, or python-fuse (another binding, also `fuse`)
        sys.exit("sharedfs.py: needs fusepy (Debian: python3-fusepy libfuse2; run /usr/bin/python3)")

STATS_NAME = ".sharedfs-stats"
STATS_PATH = "/" + STATS_NAME
STAT_KEYS = ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_rdev", "st_size",
             "st_blocks", "st_atime_ns", "st_mtime_ns", "st_ctime_ns")
STATVFS_KEYS = ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree",
                "f_favail", "f_flag", "f_namemax")


class TokenBucket:
    """One bandwidth budget shared by every reading thread.

    Tokens are bytes; they accrue at `rate` per second up to `burst`. A read takes its bytes at
    once, possibly driving the bucket into debt, and the reader sleeps until the debt is paid, so
    concurrent readers queue behind each other and together never exceed the rate (beyond one
    burst)."""

    def __init__(self, rate):
        self.rate = rate
        self.burst = max(rate * 0.05, 64 * 1024)
        self.tokens = self.burst
        self.last = time.monotonic()
        self.lock = threading.Lock()

    def take(self, n):
        with self.lock:
            now = time.monotonic()
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
            self.last = now
            self.tokens -= n
            debt = -self.tokens
        if debt > 0:
            time.sleep(debt / self.rate)


class Counters:
    """Bytes and opens, in total, per file and per process; all under one lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.bytes_read = 0
        self.opens = 0
        self.files = {}
        self.file_opens = {}
        self.readers = {}

    def _reader(self, pid, uid):
        r = self.readers.get(pid)
        if r is None:
            try:
                with open(f"/proc/{pid}/comm") as f:
                    comm = f.read().strip()
            except OSError:
                comm = ""
            r = self.readers[pid] = {"comm": comm, "uid": uid, "bytes_read": 0, "opens": 0}
        return r

    def opened(self, path, pid, uid):
        with self.lock:
            self.opens += 1
            self.file_opens[path] = self.file_opens.get(path, 0) + 1
            self._reader(pid, uid)["opens"] += 1

    def read(self, path, n, pid, uid):
        with self.lock:
            self.bytes_read += n
            self.files[path] = self.files.get(path, 0) + n
            self._reader(pid, uid)["bytes_read"] += n

    def render(self, extra):
        with self.lock:
            doc = dict(extra, bytes_read=self.bytes_read, opens=self.opens, files=dict(self.files),
                       file_opens=dict(self.file_opens),
                       readers={str(pid): dict(r) for pid, r in self.readers.items()})
        return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


class SharedFs(fuse.Operations):
    use_ns = True  # times in nanoseconds (fusepy warns otherwise)

    def __init__(self, src, mbps, open_latency_ms, holds=None):
        self.src = os.path.realpath(src)
        # {"opens": path or None, "reads": path or None, "reads_from": bytes}
        self.holds = holds or {"opens": None, "reads": None, "reads_from": 0}
        self.mbps = mbps
        self.open_latency = open_latency_ms / 1000.0
        self.bucket = TokenBucket(mbps * 1e6) if mbps > 0 else None
        self.counters = Counters()
        self.started = time.time_ns()
        # Open stats files: handle -> snapshot. Handles above any file descriptor.
        self.snapshots = {}
        self.next_snapshot = 1 << 32
        self.snapshot_lock = threading.Lock()
        self.delivered = {}  # open file handle -> bytes it has delivered (for --hold-reads)

    def _real(self, path):
        # FUSE gives absolute, normalised paths (no "." or ".." parts).
        return self.src + path if path != "/" else self.src

    @staticmethod
    def _held(gate):
        while gate and os.path.lexists(gate):
            time.sleep(0.02)

    @staticmethod
    def _caller():
        uid, _gid, pid = fuse.fuse_get_context()
        return pid, uid

    # --- metadata ---------------------------------------------------------------------------
    def getattr(self, path, fh=None):
        if path == STATS_PATH:
            # Size: large enough for any snapshot. With direct_io the kernel reads until our EOF.
            return {"st_mode": 0o100444, "st_nlink": 1, "st_uid": 0, "st_gid": 0,
                    "st_size": 1 << 24, "st_atime": self.started, "st_mtime": time.time_ns(),
                    "st_ctime": self.started}
        try:
            st = os.lstat(self._real(path))
        except OSError as e:
            raise fuse.FuseOSError(e.errno)
        attrs = {k: getattr(st, k) for k in STAT_KEYS}
        for t in ("st_atime", "st_mtime", "st_ctime"):
            attrs[t] = attrs.pop(t + "_ns")
        return attrs

    def readdir(self, path, fh):
        try:
            names = os.listdir(self._real(path))
        except OSError as e:
            raise fuse.FuseOSError(e.errno)
        if path == "/":
            names.append(STATS_NAME)
        return [".", ".."] + names

    def readlink(self, path):
        try:
            return os.readlink(self._real(path))
        except OSError as e:
            raise fuse.FuseOSError(e.errno)

    def statfs(self, path):
        st = os.statvfs(self.src)
        return {k: getattr(st, k) for k in STATVFS_KEYS}

    # --- files (raw_fi: `fi` is the kernel's fuse_file_info) --------------------------------
    def open(self, path, fi):
        if fi.flags & (os.O_WRONLY | os.O_RDWR | os.O_TRUNC | os.O_APPEND):
            raise fuse.FuseOSError(errno.EROFS)
        fi.direct_io = 1  # no page cache: every read of every byte comes here
        if path == STATS_PATH:
            data = self.counters.render({"src": self.src, "mbps": self.mbps,
                                         "open_latency_ms": self.open_latency * 1000})
            with self.snapshot_lock:
                fi.fh = self.next_snapshot
                self.next_snapshot += 1
                self.snapshots[fi.fh] = data
            return 0
        if self.open_latency:
            time.sleep(self.open_latency)
        self._held(self.holds["opens"])
        try:
            fi.fh = os.open(self._real(path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            raise fuse.FuseOSError(e.errno)
        self.counters.opened(path, *self._caller())
        return 0

    def read(self, path, size, offset, fi):
        with self.snapshot_lock:
            snapshot = self.snapshots.get(fi.fh)
        if snapshot is not None:
            return snapshot[offset:offset + size]
        if self.holds["reads"]:
            with self.snapshot_lock:
                delivered = self.delivered.get(fi.fh, 0)
            if delivered >= self.holds["reads_from"]:
                self._held(self.holds["reads"])
        try:
            data = os.pread(fi.fh, size, offset)
        except OSError as e:
            raise fuse.FuseOSError(e.errno)
        if self.holds["reads"]:
            with self.snapshot_lock:
                self.delivered[fi.fh] = self.delivered.get(fi.fh, 0) + len(data)
        if data and self.bucket:
            self.bucket.take(len(data))
        self.counters.read(path, len(data), *self._caller())
        return data

    def release(self, path, fi):
        with self.snapshot_lock:
            if self.snapshots.pop(fi.fh, None) is not None:
                return 0
            self.delivered.pop(fi.fh, None)
        os.close(fi.fh)
        return 0


def main():
    ap = argparse.ArgumentParser(
        description="A read-only FUSE view of SRC at MOUNT that counts, throttles and delays reads "
                    "(see the module docstring). Stays in the foreground.")
    ap.add_argument("src", help="directory to serve")
    ap.add_argument("mount", help="mount point (an existing directory)")
    ap.add_argument("--mbps", type=float, default=0.0,
                    help="read bandwidth shared by all readers, MB/s (10^6 bytes); 0: unlimited")
    ap.add_argument("--open-latency-ms", type=float, default=0.0,
                    help="delay before every open of a file, ms")
    ap.add_argument("--hold-opens", metavar="PATH",
                    help="every open of a file waits while PATH exists")
    ap.add_argument("--hold-reads", metavar="PATH",
                    help="every read through an open file that has delivered --hold-reads-from bytes "
                         "waits while PATH exists")
    ap.add_argument("--hold-reads-from", type=int, default=1 << 20, metavar="BYTES",
                    help="the bytes an open file delivers before --hold-reads holds it (default 1 MiB)")
    ap.add_argument("--nonempty", action="store_true",
                    help="mount over a directory that has entries (hiding them, as a user's mount would)")
    a = ap.parse_args()
    if not os.path.isdir(a.src):
        sys.exit(f"sharedfs.py: {a.src}: not a directory")
    if not os.path.isdir(a.mount):
        sys.exit(f"sharedfs.py: {a.mount}: no such mount point")
    if a.mbps < 0 or a.open_latency_ms < 0:
        sys.exit("sharedfs.py: --mbps and --open-latency-ms must not be negative")
    extra = {"nonempty": True} if a.nonempty else {}
    holds = {"opens": a.hold_opens, "reads": a.hold_reads, "reads_from": a.hold_reads_from}
    fuse.FUSE(SharedFs(a.src, a.mbps, a.open_latency_ms, holds), a.mount, raw_fi=True, foreground=True,
              nothreads=False, ro=True, allow_other=True, default_permissions=True,
              fsname="sharedfs", attr_timeout=0, entry_timeout=0, negative_timeout=0, **extra)


if __name__ == "__main__":
    main()
