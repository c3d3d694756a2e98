#!/usr/bin/env python3
"""Replay of llm-d's file-system KV offloading backend (llmd_fs_backend) file I/O.

Upstream (read with the search tool): llm-d/llm-d-kv-cache (formerly llm-d-kv-cache-manager)
  kv_connectors/llmd_fs_backend/llmd_fs_backend/file_mapper.py  FileMapper
      base  <root>/<model_name>/block_size_<n>_blocks_per_file_<m>/
            tp_<tp>_pp_size_<pp>_pcp_size_<pcp>/rank_<rank>/<dtype>
            (the model name keeps its "/": one more directory level)
      get_file_name  <base>/<hex[:3]>/<hex[3:5]>/<hex>.bin
  kv_connectors/llmd_fs_backend/llmd_fs_backend/manager.py  SharedStorageOffloadingManager
      lookup: os.path.exists(file); prepare_store always accepts (an existing file is simply
      written again); no eviction: "it is up to the storage system" (external cleanup)
  kv_connectors/llmd_fs_backend/csrc/storage/backends/fs_io/file_io.cpp  FileIO
      write_buffer_to_file  fs::create_directories(parent); tmp = target + "_<random_device>.tmp"
                            (one suffix per thread); open(tmp, O_RDWR|O_CREAT, 0664) (no O_TRUNC,
                            no O_EXCL); fdopen(fd, "wb"); write(2) in 4 MiB pieces; fflush;
                            rename(tmp, target) while the fd is still open; then fclose and
                            std::remove(tmp) (ENOENT, the name is gone)
                            option O_TMPFILE: open(parent, O_RDWR|O_TMPFILE, 0664); write;
                            linkat(fd, "", AT_FDCWD, target, AT_EMPTY_PATH); EEXIST = success
      read_buffer_from_file std::ifstream(path, binary|ate): open O_RDONLY, lseek(END) for the
                            size, lseek(0), read the whole file into the staging buffer
      update_atime          utimensat(AT_FDCWD, path, {UTIME_NOW, UTIME_OMIT}, 0) after a load,
                            so an external cleaner can evict by atime
Scaled: 1 MiB files (4 GPU blocks per file), 32 files, 4 I/O threads.
"""

import errno
import hashlib
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import O_TMPFILE, ReplayFailure, sc, sys_open  # noqa: E402

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
FILE_SIZE = 1 << 20
NFILES = 32
WRITE_PIECE = 4 << 20
_tls = threading.local()


def tmp_file_suffix():
    if not hasattr(_tls, "suffix"):
        _tls.suffix = f"_{random.getrandbits(32)}.tmp"
    return _tls.suffix


class FileMapper:
    def __init__(self, root):
        self.base_path = (f"{root}/{MODEL}/block_size_16_blocks_per_file_4/"
                          f"tp_1_pp_size_1_pcp_size_1/rank_0/bfloat16")

    def get_file_name(self, key: bytes):
        h = key.hex()
        return f"{self.base_path}/{h[:3]}/{h[3:5]}/{h}.bin"


def write_buffer_to_file(target, data, o_tmpfile=False):
    parent = os.path.dirname(target)
    common.sys_makedirs(parent)                       # fs::create_directories
    tmp = target + tmp_file_suffix()
    if o_tmpfile:
        fd = sys_open(parent, os.O_RDWR | O_TMPFILE, 0o664)
    else:
        fd = sys_open(tmp, os.O_RDWR | os.O_CREAT, 0o664)
    try:
        mv = memoryview(data)
        for off in range(0, len(mv), WRITE_PIECE):
            common.sys_write_all(fd, mv[off:off + WRITE_PIECE], tmp)
        if o_tmpfile:
            r = sc(f"linkat(fd of O_TMPFILE, '', AT_FDCWD, {target!r}, AT_EMPTY_PATH)",
                   common.linkat_empty_path, fd, target, expect=(errno.EEXIST,))
            # EEXIST: another writer already published the block -> success
        else:
            common.sys_rename(tmp, target)            # renamed while still open
    finally:
        common.sys_close(fd, tmp)                     # fclose in ~TmpFile
        if not o_tmpfile:
            r = sc(f"unlink({tmp!r}) after rename", os.unlink, tmp, expect=(errno.ENOENT,))
            if not isinstance(r, OSError):
                raise ReplayFailure(f"unlink({tmp!r}) after rename succeeded: the temp name "
                                    f"still existed")


def read_buffer_from_file(path):
    fd = sys_open(path, os.O_RDONLY)
    try:
        size = sc(f"lseek({path!r}, 0, SEEK_END)", os.lseek, fd, 0, os.SEEK_END)
        sc(f"lseek({path!r}, 0, SEEK_SET)", os.lseek, fd, 0, os.SEEK_SET)
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:
            n = sc(f"read({path!r}, {size - got} bytes at {got})", os.readv, fd, [view[got:]])
            if n == 0:
                raise ReplayFailure(f"read of {path}: EOF after {got} of {size} bytes")
            got += n
        return bytes(buf)
    finally:
        os.close(fd)


def update_atime(path):
    sc(f"utimensat({path!r}, {{UTIME_NOW, UTIME_OMIT}})", common.utimensat, path,
       common.UTIME_NOW, common.UTIME_OMIT)


def scenario(ctx):
    fm = FileMapper(ctx.root)
    keys = [hashlib.sha256(f"block|{i}".encode()).digest() for i in range(NFILES)]
    version = {k: 0 for k in keys}
    live = set(keys)

    def data(k):
        return common.payload(k.hex(), FILE_SIZE, version[k])

    with ctx.phase("store: create_directories, O_RDWR|O_CREAT temp, rename while open, unlink tmp -> ENOENT") as run:
        if run:
            common.pmap(lambda k: write_buffer_to_file(fm.get_file_name(k), data(k)), keys, 4)
            for k in keys:
                st = common.sys_stat(fm.get_file_name(k))
                ctx.check(st.st_size == FILE_SIZE, f"{fm.get_file_name(k)}: size {st.st_size}")
    store = "store: create_directories, O_RDWR|O_CREAT temp, rename while open, unlink tmp -> ENOENT"

    with ctx.phase("lookup: os.path.exists hits and misses", needs=(store,)) as run:
        if run:
            for k in keys:
                ctx.check(common.exists(fm.get_file_name(k)), f"miss on stored {k.hex()}")
            for i in range(200):
                miss = hashlib.sha256(f"miss|{i}".encode()).digest()
                ctx.check(not common.exists(fm.get_file_name(miss)), "hit on a missing block")

    with ctx.phase("load: open, lseek(END), lseek(0), read whole file, byte-exact", needs=(store,)) as run:
        if run:
            def ld(k):
                common.check_bytes(f"load {k.hex()[:16]}", read_buffer_from_file(
                    fm.get_file_name(k)), data(k))
            common.pmap(ld, keys, 4)

    with ctx.phase("store again over existing files (another replica; tmp + rename onto target)", needs=(store,)) as run:
        if run:
            for k in keys[:4]:
                version[k] = 1
                write_buffer_to_file(fm.get_file_name(k), data(k))
                common.check_bytes("re-stored block", read_buffer_from_file(fm.get_file_name(k)),
                                   data(k))

    with ctx.phase("O_TMPFILE + linkat(AT_EMPTY_PATH) publish (optional llm-d mode)", needs=(store,)) as run:
        if run:
            k = hashlib.sha256(b"tmpfile-block").digest()
            target = fm.get_file_name(k)
            common.sys_makedirs(os.path.dirname(target))
            try:
                fd = os.open(os.path.dirname(target), os.O_RDWR | O_TMPFILE, 0o664)
                os.close(fd)
                supported = True
            except OSError as e:
                if e.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                    raise ReplayFailure(f"open(dir, O_RDWR|O_TMPFILE) -> {common.errname(e.errno)}"
                                        f" (expected success or EOPNOTSUPP)")
                supported = False
                ctx.note(f"O_TMPFILE unsupported here ({common.errname(e.errno)}): llm-d must "
                         f"run with its O_TMPFILE option off on this filesystem")
            if supported:
                version[k] = 0
                write_buffer_to_file(target, data(k), o_tmpfile=True)
                write_buffer_to_file(target, data(k), o_tmpfile=True)   # EEXIST -> success
                common.check_bytes("O_TMPFILE-published block", read_buffer_from_file(target),
                                   data(k))
                keys.append(k)
                live.add(k)

    with ctx.phase("atime: utimensat {UTIME_NOW, UTIME_OMIT} after loads; mtime kept", needs=(store,)) as run:
        if run:
            old_ns = time.time_ns() - 3600 * 10 ** 9
            mtimes = {}
            for k in keys:
                p = fm.get_file_name(k)
                sc(f"utimensat({p!r}, {{atime=-1h, UTIME_OMIT}})", common.utimensat, p, old_ns,
                   common.UTIME_OMIT)
                st = common.sys_stat(p)
                ctx.check(abs(st.st_atime_ns - old_ns) < 10 ** 9,
                          f"utimensat(atime=-1h) not visible: st_atime off by "
                          f"{(st.st_atime_ns - old_ns) / 1e9:.1f}s on {p}")
                mtimes[k] = st.st_mtime_ns
            hot = keys[:10]
            for k in hot:
                p = fm.get_file_name(k)
                read_buffer_from_file(p)
                update_atime(p)
            now = time.time_ns()
            for k in keys:
                st = common.sys_stat(fm.get_file_name(k))
                ctx.check(st.st_mtime_ns == mtimes[k], f"mtime changed by a UTIME_OMIT update")
                if k in hot:
                    ctx.check(now - st.st_atime_ns < 120 * 10 ** 9,
                              f"update_atime (UTIME_NOW) not visible in st_atime")
                else:
                    ctx.check(st.st_atime_ns < now - 1800 * 10 ** 9,
                              f"st_atime of an unread file moved to "
                              f"{(now - st.st_atime_ns) / 1e9:.0f}s ago")
    atime = "atime: utimensat {UTIME_NOW, UTIME_OMIT} after loads; mtime kept"

    with ctx.phase("external cleaner: walk, evict files with old st_atime", needs=(atime,)) as run:
        if run:
            cutoff = time.time_ns() - 1800 * 10 ** 9
            removed = 0
            for dirpath, _, files in os.walk(fm.base_path):
                for name in files:
                    p = os.path.join(dirpath, name)
                    if common.sys_stat(p).st_atime_ns < cutoff:
                        common.sys_unlink(p)
                        removed += 1
            ctx.check(removed == len(keys) - 10, f"cleaner removed {removed}, want "
                                                 f"{len(keys) - 10}")
            for k in keys[10:]:
                live.discard(k)
            for k in keys:
                ctx.check(common.exists(fm.get_file_name(k)) == (k in live),
                          "lookup after cleanup disagrees with the cleaner")

    with ctx.phase("restart keeps every stored block", needs=(store,), restart=True) as run:
        if run:
            ctx.remount()
            for k in keys:
                p = fm.get_file_name(k)
                ctx.check(common.exists(p) == (k in live),
                          f"after restart stat({p}) says {'missing' if k in live else 'present'}")
                if k in live:
                    st = common.sys_stat(p)   # the cleaner may run right after a restart
                    ctx.check(time.time_ns() - st.st_atime_ns < 600 * 10 ** 9,
                              f"st_atime set by update_atime lost across the restart: "
                              f"{(time.time_ns() - st.st_atime_ns) / 1e9:.0f}s ago")
                    common.check_bytes(f"{k.hex()[:16]} after restart",
                                       read_buffer_from_file(p), data(k))


if __name__ == "__main__":
    sys.exit(common.main("llmd_fs_backend", scenario))
