#!/usr/bin/env python3
"""Replay of LMCache's GDS backend (GdsBackend) file layout and I/O, without a GPU.

Upstream (read with the search tool): LMCache/LMCache
  lmcache/v1/storage_backend/gds_backend.py
    get_fstype              reads /proc/mounts, longest mount-point prefix of gds_path
    GdsBackend._key_to_path <gds_path>/<str(chunk_hash)[:2]>/<str(chunk_hash)[2:4]>/
                            urllib.parse.quote(key.to_string(), safe="") + ".kvcache.safetensors"
    _async_save_bytes_to_disk  os.makedirs(<l1>/<l2>, exist_ok=True) once per sub-directory;
                            tmp = ".tmp" + uuid4().hex[:8]; _save_gds(); then save_metadata()
    _save_gds               open(path+tmp, "wb").write(4096-byte metadata block), then
                              cuFile path: CuFile(path+tmp, "r+", use_direct_io) .write(...,
                                file_offset=4096)   -> replayed as O_RDWR|O_DIRECT pwrite at 4096
                              POSIX fallback: os.open(O_RDWR); os.ftruncate(fd, n + 4096);
                                mmap(fd, n + 4096, PROT_WRITE, MAP_SHARED); os.close(fd);
                                copy into the mapping at 4096; mm.close()
                            os.rename(path+tmp, path)
    save_metadata           open(path + ".metadata" + tmp, "wb").write(metadata);
                            os.rename(.., path + ".metadata")
    _scan_metadata (start)  os.scandir(gds_path) -> 2-char dirs -> 2-char dirs -> files ending
                            ".kvcache.safetensors.metadata"; unquote(name) -> key
    _read_metadata_info     os.open(O_RDONLY|O_NOATIME) (fallback to O_RDONLY on EPERM/EINVAL);
                            os.read(fd, 4096); json after an 8-byte length
    _try_to_read_metadata   os.path.exists(path + ".metadata") for keys not in the hot cache
    _load_gds               cuFile: read(size, file_offset=4096)  -> O_RDONLY|O_DIRECT pread
                            POSIX fallback: os.open(O_RDONLY); os.fstat size check;
                            mmap(fd, size, PROT_READ, MAP_PRIVATE|MAP_POPULATE); os.close(fd);
                            copy out from offset 4096
    remove()                NotImplementedError (no eviction): a key is only ever re-saved.
Scaled: 512 KiB - 2 MiB chunks (4 KiB-aligned, as KV tensors are), 32 chunks.
"""

import json
import mmap
import os
import struct
import sys
import urllib.parse
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import O_DIRECT, O_NOATIME, ReplayFailure, sc, sys_open  # noqa: E402

MODEL = "meta-llama/Llama-3.1-70B-Instruct"
META_MAX = 4096
DATA_SUFFIX = ".kvcache.safetensors"
META_SUFFIX = ".metadata"


def key_string(chunk_hash):
    return f"vllm@{MODEL}@4@0@{chunk_hash:x}@bfloat16"


def pack_metadata(nbytes, shape):
    meta = {"kvcache": {"dtype": "BF16", "shape": shape, "data_offsets": [0, nbytes], "fmt": 1,
                        "__metadata__": {"lmcache_version": "1"}}}
    s = json.dumps(meta).encode()
    s += b" " * (META_MAX - 8 - len(s))
    return struct.pack("<Q", len(s)) + s


def unpack_metadata(buf):
    n = struct.unpack("<Q", buf[:8])[0]
    meta = json.loads(buf[8:8 + n].rstrip(b" ").decode())["kvcache"]
    return meta["data_offsets"][1] - meta["data_offsets"][0], meta


def get_fstype(path):
    best, fstype = "", ""
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and path.startswith(parts[1]) and len(parts[1]) > len(best):
                best, fstype = parts[1], parts[2]
    return fstype


class Gds:
    def __init__(self, ctx, root, mode):
        self.ctx, self.root, self.mode = ctx, root, mode   # mode: "cufile" | "posix"
        self.dirs = set()
        self.hot = {}          # key string -> (path, nbytes)
        self.use_noatime = True

    def key_to_path(self, chunk_hash):
        h = str(chunk_hash)
        l1, l2 = h[:2], h[2:4]
        ks = key_string(chunk_hash)
        return (os.path.join(self.root, l1, l2, urllib.parse.quote(ks, safe="") + DATA_SUFFIX),
                l1 + l2, l1, l2)

    def save(self, chunk_hash, data):
        path, sub, l1, l2 = self.key_to_path(chunk_hash)
        if sub not in self.dirs:
            sc(f"mkdir -p {self.root}/{l1}/{l2}", os.makedirs, os.path.join(self.root, l1, l2),
               exist_ok=True)
            self.dirs.add(sub)
        tmp = ".tmp" + uuid.uuid4().hex[:8]
        tmp_path = path + tmp
        n = len(data)
        meta = pack_metadata(n, [2, 16, n // (2 * 16 * 2 * 128), 128])
        with sc(f"open({tmp_path!r}, 'wb')", open, tmp_path, "wb") as f:
            sc(f"write({tmp_path!r}, 4096-byte header)", f.write, meta)
        if self.mode == "cufile":
            buf = common.aligned_buffer(n)
            buf[:n] = data
            fd = sys_open(tmp_path, os.O_RDWR | O_DIRECT)    # CuFile(path, "r+", direct io)
            try:
                common.sys_pwrite_all(fd, memoryview(buf)[:n], META_MAX, tmp_path, direct=True)
            finally:
                common.sys_close(fd, tmp_path)
                buf.close()
        else:
            fd = sys_open(tmp_path, os.O_RDWR)
            sc(f"ftruncate({tmp_path!r}, {n + META_MAX})", os.ftruncate, fd, n + META_MAX)
            mm = sc(f"mmap({tmp_path!r}, {n + META_MAX}, PROT_WRITE, MAP_SHARED)", mmap.mmap,
                    fd, n + META_MAX, prot=mmap.PROT_WRITE, flags=mmap.MAP_SHARED)
            common.sys_close(fd, tmp_path)
            mm[META_MAX:META_MAX + n] = data
            sc(f"munmap({tmp_path!r}) after MAP_SHARED writes", mm.close)
        common.sys_rename(tmp_path, path)
        mtmp = path + META_SUFFIX + tmp
        with sc(f"open({mtmp!r}, 'wb')", open, mtmp, "wb") as f:
            sc(f"write({mtmp!r})", f.write, meta)
        common.sys_rename(mtmp, path + META_SUFFIX)
        self.hot[key_string(chunk_hash)] = (path, n)

    def read_metadata(self, mpath):
        if self.use_noatime:
            try:
                fd = os.open(mpath, os.O_RDONLY | O_NOATIME)
            except (PermissionError, AttributeError, OSError) as e:
                if isinstance(e, FileNotFoundError):
                    raise
                self.ctx.note(f"open({mpath!r}, O_RDONLY|O_NOATIME) -> "
                              f"{common.errname(getattr(e, 'errno', 0))}: LMCache falls back "
                              f"to O_RDONLY")
                self.use_noatime = False
                fd = sys_open(mpath, os.O_RDONLY)
        else:
            fd = sys_open(mpath, os.O_RDONLY)
        try:
            buf = sc(f"read({mpath!r}, 4096)", os.read, fd, META_MAX)
        finally:
            os.close(fd)
        return unpack_metadata(buf)

    def contains(self, chunk_hash):
        if key_string(chunk_hash) in self.hot:
            return True
        path = self.key_to_path(chunk_hash)[0]
        if common.exists(path + META_SUFFIX):
            nbytes, _ = self.read_metadata(path + META_SUFFIX)
            self.hot[key_string(chunk_hash)] = (path, nbytes)
            return True
        return False

    def load(self, chunk_hash):
        path, nbytes = self.hot[key_string(chunk_hash)]
        if self.mode == "cufile":
            buf = common.aligned_buffer(nbytes)
            fd = sys_open(path, os.O_RDONLY | O_DIRECT)
            try:
                n = common.sys_pread_into(fd, memoryview(buf)[:nbytes], META_MAX, path, True)
            finally:
                common.sys_close(fd, path)
            self.ctx.check(n == nbytes, f"O_DIRECT pread at 4096 of {path}: {n} of {nbytes}")
            out = bytes(buf[:nbytes])
            buf.close()
            return out
        fd = sys_open(path, os.O_RDONLY)
        size = os.fstat(fd).st_size
        if size < META_MAX + nbytes:
            os.close(fd)
            raise ReplayFailure(f"fstat({path!r}).st_size={size} < {META_MAX + nbytes}")
        mm = sc(f"mmap({path!r}, {size}, PROT_READ, MAP_PRIVATE|MAP_POPULATE)", mmap.mmap, fd,
                size, prot=mmap.PROT_READ, flags=mmap.MAP_PRIVATE | mmap.MAP_POPULATE)
        os.close(fd)
        out = mm[META_MAX:META_MAX + nbytes]
        mm.close()
        return out

    def scan(self):
        """_scan_metadata at start-up: rebuild the hot cache from the .metadata files."""
        found = {}
        target = DATA_SUFFIX + META_SUFFIX
        with sc(f"scandir({self.root!r})", os.scandir, self.root) as it:
            l1s = [e.name for e in it if e.is_dir() and len(e.name) == 2]
        for l1 in l1s:
            with sc(f"scandir({l1})", os.scandir, os.path.join(self.root, l1)) as it:
                l2s = [e.name for e in it if e.is_dir() and len(e.name) == 2]
            for l2 in l2s:
                with sc(f"scandir({l1}/{l2})", os.scandir,
                        os.path.join(self.root, l1, l2)) as it2:
                    for fe in it2:
                        if not fe.is_file() or not fe.name.endswith(target):
                            continue
                        ks = urllib.parse.unquote(fe.name[:-len(target)])
                        nbytes, _ = self.read_metadata(fe.path)
                        found[ks] = (fe.path[:-len(META_SUFFIX)], nbytes)
        return found


def scenario(ctx):
    sizes = [512 << 10, 1 << 20, 2 << 20, 768 << 10]
    chunks = {}   # chunk_hash -> (mode, size, version)
    gds = {}

    with ctx.phase("init: makedirs, fstype from /proc/mounts") as run:
        if run:
            sc(f"mkdir -p {ctx.root}", os.makedirs, ctx.root, exist_ok=True)
            fstype = get_fstype(os.path.realpath(ctx.root))
            ctx.note(f"fstype of gds_path: {fstype!r} (tmpfs/overlayfs would disable cuFile)")
            for mode in ("cufile", "posix"):
                gds[mode] = Gds(ctx, ctx.root, mode)
    init = "init: makedirs, fstype from /proc/mounts"

    with ctx.phase("save: header + O_DIRECT pwrite at 4096 (cuFile) / ftruncate + MAP_SHARED (POSIX), rename, .metadata", needs=(init,)) as run:
        if run:
            for i in range(32):
                h = (1_000_003 * (i + 7) ** 3) % (10 ** 15) + 10 ** 14   # decimal l1/l2 fan-out
                mode = "cufile" if i % 2 == 0 else "posix"
                size = sizes[i % len(sizes)]
                gds[mode].save(h, common.payload(key_string(h), size))
                chunks[h] = (mode, size, 0)
            for h, (mode, size, _) in chunks.items():
                path = gds[mode].key_to_path(h)[0]
                ctx.check(common.sys_stat(path).st_size == META_MAX + size,
                          f"{path}: size {common.sys_stat(path).st_size}, want {META_MAX + size}")
    save = "save: header + O_DIRECT pwrite at 4096 (cuFile) / ftruncate + MAP_SHARED (POSIX), rename, .metadata"

    with ctx.phase("load byte-exact: O_DIRECT pread at 4096 / mmap MAP_PRIVATE|MAP_POPULATE", needs=(save,)) as run:
        if run:
            for h, (mode, size, ver) in chunks.items():
                for m in ("cufile", "posix"):   # each chunk read back both ways
                    gds[m].hot[key_string(h)] = (gds[mode].key_to_path(h)[0], size)
                    common.check_bytes(f"{m} load of {key_string(h)} (saved by {mode})",
                                       gds[m].load(h), common.payload(key_string(h), size, ver))

    with ctx.phase("contains: hot-cache misses go to stat(.metadata) + O_NOATIME header read", needs=(save,)) as run:
        if run:
            cold = Gds(ctx, ctx.root, "cufile")
            for h, (mode, size, ver) in chunks.items():
                ctx.check(cold.contains(h), f"contains({key_string(h)}) missed a saved chunk")
                ctx.check(cold.hot[key_string(h)][1] == size, "metadata size mismatch")
            for i in range(48):
                ctx.check(not cold.contains(9 * 10 ** 14 + i), "contains() hit a missing key")

    with ctx.phase("re-save existing keys (rename over data and .metadata)", needs=(save,)) as run:
        if run:
            for h in list(chunks)[:6]:
                mode, size, _ = chunks[h]
                gds[mode].save(h, common.payload(key_string(h), size, 1))
                chunks[h] = (mode, size, 1)
                common.check_bytes(f"re-read of re-saved {key_string(h)}", gds[mode].load(h),
                                   common.payload(key_string(h), size, 1))

    with ctx.phase("start-up scan: scandir 2 levels, skip temp files", needs=(save,)) as run:
        if run:
            # A save interrupted by a crash leaves a temp file; the scan must ignore it.
            h0 = next(iter(chunks))
            stray = gds["cufile"].key_to_path(h0)[0] + ".tmp0badf00d"
            with open(stray, "wb") as f:
                f.write(b"x" * 100)
            found = gds["cufile"].scan()
            want = {key_string(h) for h in chunks}
            ctx.check(set(found) == want, f"scan found {len(found)} keys, want {len(want)}")
            common.sys_unlink(stray)

    with ctx.phase("restart: scan rebuilds the index, every chunk byte-exact", needs=(save,), restart=True) as run:
        if run:
            ctx.remount()
            fresh = Gds(ctx, ctx.root, "posix")
            found = fresh.scan()
            ctx.check(set(found) == {key_string(h) for h in chunks},
                      f"scan after restart found {len(found)} of {len(chunks)} keys")
            fresh.hot = found
            direct = Gds(ctx, ctx.root, "cufile")
            direct.hot = found
            for h, (mode, size, ver) in chunks.items():
                want = common.payload(key_string(h), size, ver)
                common.check_bytes(f"mmap load after restart {key_string(h)}", fresh.load(h), want)
                common.check_bytes(f"O_DIRECT load after restart {key_string(h)}",
                                   direct.load(h), want)


if __name__ == "__main__":
    sys.exit(common.main("lmcache_gds", scenario))
