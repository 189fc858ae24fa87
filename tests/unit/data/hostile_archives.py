#!/usr/bin/env python3
"""Writes hostile archives into the directory given as argv[1]; argv[2] is an absolute path
outside the destination that they try to reach. Each archive is named for its attack."""
import gzip
import io
import os
import sys
import tarfile
import zipfile

out, outside = sys.argv[1], sys.argv[2]


def tar(name, members, mode="w"):
    with tarfile.open(os.path.join(out, name), mode, format=tarfile.GNU_FORMAT) as t:
        for info, data in members:
            t.addfile(info, io.BytesIO(data) if data is not None else None)


def f(name, data=b"x", mode=0o644, uid=0):
    i = tarfile.TarInfo(name)
    i.size, i.mode, i.uid, i.gid = len(data), mode, uid, uid
    return i, data


def link(name, target, kind=tarfile.SYMTYPE):
    i = tarfile.TarInfo(name)
    i.type, i.linkname = kind, target
    return i, None


def special(name, kind):
    i = tarfile.TarInfo(name)
    i.type, i.devmajor, i.devminor = kind, 1, 3
    return i, None


def d(name):
    i = tarfile.TarInfo(name)
    i.type, i.mode = tarfile.DIRTYPE, 0o755
    return i, None


tar("dotdot.tar", [f("ok"), f("../escaped")])
tar("deep-dotdot.tar", [f("a/b/../../../escaped")])
tar("absolute.tar", [f(outside + "/escaped")])
tar("symlink-then-write.tar", [link("evil", outside), f("evil/escaped")])
tar("symlink-dotdot-then-write.tar", [link("up", ".."), f("up/escaped")])
tar("symlink-chain.tar", [d("a"), link("a/b", "../c"), link("c", outside), f("a/b/escaped")])
tar("hardlink-outside.tar", [link("h", "../" * 8 + outside.lstrip("/") + "/sentinel", tarfile.LNKTYPE)])
tar("hardlink-absolute.tar", [link("h", outside + "/sentinel", tarfile.LNKTYPE)])
tar("hardlink-via-symlink.tar", [link("s", outside + "/sentinel"), link("h", "s", tarfile.LNKTYPE)])
tar("replace-with-symlink.tar", [f("a", b"first"), link("a", outside + "/sentinel"), f("a", b"second")])
tar("devices.tar", [special("null", tarfile.CHRTYPE), special("blk", tarfile.BLKTYPE),
                    special("fifo", tarfile.FIFOTYPE), f("regular")])
tar("setuid.tar", [f("suid", b"#!/bin/sh\n", 0o4755), f("sgid", b"x", 0o2755), f("sticky", b"x", 0o1777)])
tar("owner.tar", [f("owned", b"x", 0o644, uid=12345)])
tar("dir-then-file.tar", [d("d"), f("d/inner"), f("d")])
tar("long-name.tar", [f("n" * 5000)])
tar("deep.tar", [f("/".join(["d"] * 1100) + "/leaf")])
tar("many-entries.tar", [f("e%05d" % i, b"") for i in range(2000)])
# A bomb: 64 MiB of zeros compress to ~64 KiB.
tar("bomb.tar.gz", [f("zeros", b"\0" * (64 << 20))], mode="w:gz")
# Truncated compressed tar.
full = io.BytesIO()
with tarfile.open(fileobj=full, mode="w:gz") as t:
    data = os.urandom(200000)
    info = tarfile.TarInfo("random")
    info.size = len(data)
    t.addfile(info, io.BytesIO(data))
with open(os.path.join(out, "truncated.tar.gz"), "wb") as fh:
    fh.write(full.getvalue()[: len(full.getvalue()) // 2])
with zipfile.ZipFile(os.path.join(out, "dotdot.zip"), "w") as z:
    z.writestr("fine.txt", "ok")
    z.writestr("../escaped", "pwned")
with zipfile.ZipFile(os.path.join(out, "absolute.zip"), "w") as z:
    z.writestr(outside + "/escaped", "pwned")
# Not archives: stagehand copies these as they are.
with open(os.path.join(out, "plain.txt"), "w") as fh:
    fh.write("just text\n")
with gzip.open(os.path.join(out, "data.csv.gz"), "wb") as fh:
    fh.write(b"a,b\n1,2\n")
open(os.path.join(out, "empty"), "w").close()
