#!/usr/bin/env python3
"""Replay of NIXL's POSIX plugin file I/O, and of Dynamo KVBM's disk tier that drives it.

Upstream (read with the search tool):
  ai-dynamo/nixl src/plugins/posix/README.md, io_uring_io_queue.cpp, linux_aio_io_queue.cpp
      FILE_SEG descriptors = (buffer, length, fd in devId, file offset); postXfer issues up to
      64 I/Os at once (io_uring_prep_read/io_uring_prep_write = pread/pwrite at the
      descriptor's offset), completions come back in any order; the same fd serves reads and
      writes
  ai-dynamo/nixl src/utils/file/README.md (path-mode registration, queryMem)
      "<modes>:<path>": ro -> O_RDONLY, rw -> O_RDWR, +direct O_DIRECT, +sync O_SYNC,
      +noatime O_NOATIME, +create O_CREAT (0644); opened at registerMem, closed at
      deregisterMem. queryMem: stat(path) -> size/mode/mtime, or nullopt when it fails
  ai-dynamo/dynamo lib/llm/src/block_manager/storage/disk.rs  DiskStorage (KVBM disk tier)
      mkostemp("<DYN_KVBM_DISK_CACHE_DIR>/dynamo-kvbm-disk-cache-XXXXXX", O_CLOEXEC);
      fcntl(F_GETFL) + fcntl(F_SETFL, flags | O_DIRECT); allocate_file: fallocate(fd, 0, 0,
      size), on EOPNOTSUPP ftruncate(fd, size) (zero-fill only when asked); after NIXL
      registration unlink(path): every block I/O then goes to an open, unlinked file
Scaled: 256 KiB blocks, 8 blocks per object file, a 32-block (8 MiB) KVBM pool file, 8 I/Os in
flight.
"""

import errno
import fcntl
import os
import random
import string
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import O_DIRECT, O_NOATIME, ReplayFailure, sc, sys_open  # noqa: E402

BLOCK = 256 << 10
PER_FILE = 8
POOL_BLOCKS = 32
MODES = {"ro": os.O_RDONLY, "rw": os.O_RDWR}
FLAGS = {"direct": O_DIRECT, "sync": os.O_SYNC, "noatime": O_NOATIME, "create": os.O_CREAT}


def path_mode_open(meta):
    """nixl::parsePathMeta + nixlFilePathMD: "<modes>:<path>" -> open(path, flags, 0644)."""
    modes, path = meta.split(":", 1)
    toks = modes.split(",")
    flags = MODES[toks[0]]
    for t in toks[1:]:
        flags |= FLAGS[t]
    return sys_open(path, flags, 0o644), flags


def post_xfer(fd, op, descs, what, direct, depth=8):
    """descs: (buffer slice, file offset); issued concurrently, completing in any order."""
    random.Random(len(descs)).shuffle(descs)
    if op == "WRITE":
        common.pmap(lambda d: common.sys_pwrite_all(fd, d[0], d[1], what, direct), descs, depth)
    else:
        def rd(d):
            n = common.sys_pread_into(fd, d[0], d[1], what, direct)
            if n != len(d[0]):
                raise ReplayFailure(f"pread({what}, {len(d[0])} at {d[1]}) returned {n}")
        common.pmap(rd, descs, depth)


def query_mem(path):
    st = sc(f"stat({path!r}) (queryMem)", os.stat, path, expect=(errno.ENOENT,))
    if isinstance(st, OSError):
        return None
    return {"size": st.st_size, "mode": st.st_mode, "mtime": st.st_mtime}


def block_data(name, i, ver=0):
    return common.payload(f"{name}#{i}", BLOCK, ver)


def scenario(ctx):
    objs = [f"kv_obj_{i:04d}.bin" for i in range(6)]
    versions = {}                                 # (obj, block) -> version
    staging = common.aligned_buffer(PER_FILE * BLOCK)   # registered DRAM buffer
    sview = memoryview(staging)

    def fill(name, blocks, ver):
        for b in blocks:
            sview[b * BLOCK:(b + 1) * BLOCK] = block_data(name, b, ver)
            versions[(name, b)] = ver

    def read_all_and_check(name, meta="ro,direct"):
        path = os.path.join(ctx.root, name)
        fd, flags = path_mode_open(f"{meta}:{path}")
        dst = common.aligned_buffer(PER_FILE * BLOCK)
        dview = memoryview(dst)
        try:
            post_xfer(fd, "READ", [(dview[b * BLOCK:(b + 1) * BLOCK], b * BLOCK)
                                   for b in range(PER_FILE)], path, bool(flags & O_DIRECT))
            for b in range(PER_FILE):
                common.check_bytes(f"{name} block {b}", dview[b * BLOCK:(b + 1) * BLOCK],
                                   block_data(name, b, versions[(name, b)]))
        finally:
            dview.release()
            dst.close()
            common.sys_close(fd, path)

    with ctx.phase("path-mode rw,direct,create: 8 concurrent pwrites per file at offsets") as run:
        if run:
            common.sys_makedirs(ctx.root)
            for name in objs:
                path = os.path.join(ctx.root, name)
                fill(name, range(PER_FILE), 0)
                fd, _ = path_mode_open(f"rw,direct,create:{path}")
                try:
                    post_xfer(fd, "WRITE", [(sview[b * BLOCK:(b + 1) * BLOCK], b * BLOCK)
                                            for b in range(PER_FILE)], path, True)
                finally:
                    common.sys_close(fd, path)      # deregisterMem
                ctx.check(common.sys_stat(path).st_size == PER_FILE * BLOCK,
                          f"{path}: size {common.sys_stat(path).st_size} after writes")
    write = "path-mode rw,direct,create: 8 concurrent pwrites per file at offsets"

    with ctx.phase("queryMem: stat hits (size) and misses (nullopt)", needs=(write,)) as run:
        if run:
            for name in objs:
                q = query_mem(os.path.join(ctx.root, name))
                ctx.check(q is not None and q["size"] == PER_FILE * BLOCK,
                          f"queryMem({name}) = {q}")
            for i in range(100):
                ctx.check(query_mem(os.path.join(ctx.root, f"absent_{i}.bin")) is None,
                          "queryMem found a file that was never written")

    with ctx.phase("path-mode ro,direct: concurrent preads out of order, byte-exact", needs=(write,)) as run:
        if run:
            for name in objs:
                read_all_and_check(name)

    with ctx.phase("ro,noatime and buffered rw opens read the same bytes", needs=(write,)) as run:
        if run:
            read_all_and_check(objs[0], "ro,noatime")
            read_all_and_check(objs[1], "rw")

    with ctx.phase("rw,direct without O_TRUNC: overwrite 2 blocks in place, others intact", needs=(write,)) as run:
        if run:
            name = objs[2]
            path = os.path.join(ctx.root, name)
            read_all_and_check(name, "ro")            # buffered: old blocks in the page cache
            fill(name, (2, 5), 1)
            fd, _ = path_mode_open(f"rw,direct:{path}")
            try:
                post_xfer(fd, "WRITE", [(sview[b * BLOCK:(b + 1) * BLOCK], b * BLOCK)
                                        for b in (2, 5)], path, True)
            finally:
                common.sys_close(fd, path)
            ctx.check(common.sys_stat(path).st_size == PER_FILE * BLOCK,
                      "partial overwrite changed the file size")
            read_all_and_check(name)
            read_all_and_check(name, "ro")            # buffered again: no stale cached blocks

    with ctx.phase("one rw,direct,create fd: write blocks, read them back before close", needs=(write,)) as run:
        if run:
            name = "kv_obj_rw_same_fd.bin"
            path = os.path.join(ctx.root, name)
            fill(name, range(PER_FILE), 0)
            fd, _ = path_mode_open(f"rw,direct,create:{path}")
            dst = common.aligned_buffer(PER_FILE * BLOCK)
            dview = memoryview(dst)
            try:
                post_xfer(fd, "WRITE", [(sview[b * BLOCK:(b + 1) * BLOCK], b * BLOCK)
                                        for b in reversed(range(PER_FILE))], path, True)
                post_xfer(fd, "READ", [(dview[b * BLOCK:(b + 1) * BLOCK], b * BLOCK)
                                       for b in range(PER_FILE)], path, True)
                common.check_bytes(f"{name} read through the writing fd", dview,
                                   sview[:PER_FILE * BLOCK])
            finally:
                dview.release()
                dst.close()
                common.sys_close(fd, path)
            objs.append(name)
            read_all_and_check(name)

    with ctx.phase("rw,sync,create: O_SYNC writes", needs=(write,)) as run:
        if run:
            name = "kv_obj_sync.bin"
            path = os.path.join(ctx.root, name)
            fill(name, range(PER_FILE), 0)
            fd, _ = path_mode_open(f"rw,sync,create:{path}")
            try:
                post_xfer(fd, "WRITE", [(sview[b * BLOCK:(b + 1) * BLOCK], b * BLOCK)
                                        for b in range(PER_FILE)], path, False)
            finally:
                common.sys_close(fd, path)
            objs.append(name)
            read_all_and_check(name)

    with ctx.phase("KVBM disk pool: mkostemp, F_SETFL O_DIRECT, fallocate, unlink, block I/O on the unlinked fd") as run:
        if run:
            common.sys_makedirs(ctx.root)
            size = POOL_BLOCKS * BLOCK
            suffix = "".join(random.choice(string.ascii_letters + string.digits)
                             for _ in range(6))
            path = os.path.join(ctx.root, f"dynamo-kvbm-disk-cache-{suffix}")
            fd = sys_open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            try:
                fl = sc("fcntl(F_GETFL)", fcntl.fcntl, fd, fcntl.F_GETFL)
                sc(f"fcntl({path!r}, F_SETFL, flags|O_DIRECT)", fcntl.fcntl, fd, fcntl.F_SETFL,
                   fl | O_DIRECT)
                r = sc(f"fallocate({path!r}, 0, 0, {size})", common.fallocate, fd, 0, 0, size,
                       expect=(errno.EOPNOTSUPP,))
                if isinstance(r, OSError):
                    ctx.note("fallocate -> EOPNOTSUPP: KVBM falls back to ftruncate")
                    sc(f"ftruncate({path!r}, {size})", os.ftruncate, fd, size)
                ctx.check(os.fstat(fd).st_size == size, f"pool file size {os.fstat(fd).st_size}"
                                                         f" after allocation, want {size}")
                common.sys_unlink(path)             # DiskStorage::unlink after registration
                ctx.check(not common.exists(path), "unlinked pool file still has a name")
                ctx.check(os.path.basename(path) not in common.sys_listdir(ctx.root),
                          "unlinked pool file still listed by readdir")
                pool = common.aligned_buffer(size)
                pv = memoryview(pool)
                for b in range(POOL_BLOCKS):
                    pv[b * BLOCK:(b + 1) * BLOCK] = block_data("pool", b)
                post_xfer(fd, "WRITE", [(pv[b * BLOCK:(b + 1) * BLOCK], b * BLOCK)
                                        for b in range(POOL_BLOCKS)], path + " (unlinked)", True)
                back = common.aligned_buffer(size)
                bv = memoryview(back)
                post_xfer(fd, "READ", [(bv[b * BLOCK:(b + 1) * BLOCK], b * BLOCK)
                                       for b in range(POOL_BLOCKS)], path + " (unlinked)", True)
                common.check_bytes("KVBM pool blocks read from the unlinked file", bv, pv)
                for b in (3, 17, 30):               # blocks reused for other sequences
                    pv[b * BLOCK:(b + 1) * BLOCK] = block_data("pool", b, 1)
                post_xfer(fd, "WRITE", [(pv[b * BLOCK:(b + 1) * BLOCK], b * BLOCK)
                                        for b in (3, 17, 30)], path + " (unlinked)", True)
                post_xfer(fd, "READ", [(bv[b * BLOCK:(b + 1) * BLOCK], b * BLOCK)
                                       for b in range(POOL_BLOCKS)], path + " (unlinked)", True)
                common.check_bytes("KVBM pool after block reuse", bv, pv)
                ctx.check(os.fstat(fd).st_size == size, "fstat of the unlinked pool changed")
                for v in (pv, bv):
                    v.release()
                pool.close()
                back.close()
            finally:
                os.close(fd)

    with ctx.phase("restart keeps every object file", needs=(write,), restart=True) as run:
        if run:
            ctx.remount()
            for name in objs:
                read_all_and_check(name)
            ctx.check(not any(n.startswith("dynamo-kvbm-disk-cache-")
                              for n in common.sys_listdir(ctx.root)),
                      "the unlinked KVBM pool file came back after restart")
    sview.release()
    staging.close()


if __name__ == "__main__":
    sys.exit(common.main("nixl_posix", scenario))
