#!/usr/bin/env python3
"""Replay of LMCache's local disk backend (LocalDiskBackend) file I/O.

Upstream (read with the search tool): LMCache/LMCache
  lmcache/v1/storage_backend/local_disk_backend.py
    LocalDiskBackend.__init__      os.path.exists(path) / os.makedirs(path);
                                   os.statvfs(path).f_bsize -> self.os_disk_bs
    LocalDiskBackend._key_to_path  <local_disk>/<key.to_string().replace("/", "-")>.pt
    LocalDiskBackend.write_file    if size % f_bsize != 0 or not use_odirect:
                                       open(path, "wb").write(buffer)
                                   else: os.open(path, O_CREAT|O_WRONLY|O_DIRECT, 0o644);
                                         os.write(fd, buffer); os.close(fd)
                                   (no O_TRUNC: storing a key again overwrites in place)
    LocalDiskBackend.read_file     open(path, "rb").readinto(buffer of the chunk's size), or
                                   os.open(path, O_RDONLY|O_DIRECT) +
                                   os.fdopen(fd, "rb", buffering=0).readinto(buffer);
                                   FileNotFoundError -> the key is dropped (a miss)
    LocalDiskBackend.remove        os.remove(path): eviction in submit_put_task while
                                   current_cache_size + size > max_local_disk_size (LRU policy)
  lmcache/utils.py CacheEngineKey.to_string
      f"{fmt}@{model_name}@{world_size}@{worker_id}@{chunk_hash:x}@{dtype}"

Scaled sizes: 256-token chunks at 6 KiB per token -> 1.5 MiB full chunks (a multiple of
f_bsize: the O_DIRECT path when use_odirect) and 37-token last chunks (227 KiB, not a multiple:
always buffered). Two TP workers share the directory: worker 0 with use_odirect=False, worker 1
with use_odirect=True.
"""

import collections
import hashlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import O_DIRECT, ReplayFailure, sys_open, sc  # noqa: E402

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TOKEN_BYTES = 6 * 1024
CHUNK_TOKENS = 256


def key_string(worker, chunk_hash):
    return f"vllm@{MODEL}@2@{worker}@{chunk_hash:x}@bfloat16"


def chunk_hashes(prompt_tokens):
    """LMCache hashes each 256-token chunk together with its prefix (chained)."""
    out, prev = [], "none"
    for i in range(0, len(prompt_tokens), CHUNK_TOKENS):
        toks = prompt_tokens[i:i + CHUNK_TOKENS]
        h = hashlib.sha256(f"{prev}|{','.join(map(str, toks))}".encode()).hexdigest()
        out.append((int(h[:16], 16), len(toks) * TOKEN_BYTES))
        prev = h
    return out


class Backend:
    """The file side of one LocalDiskBackend (one TP worker)."""

    def __init__(self, ctx, worker, use_odirect, max_size):
        self.ctx, self.worker, self.use_odirect = ctx, worker, use_odirect
        self.path = ctx.root
        if not common.exists(self.path):
            sc(f"mkdir -p {self.path}", os.makedirs, self.path, exist_ok=True)
        st = common.sys_statvfs(self.path)
        self.os_disk_bs = st.f_bsize
        self.dict = collections.OrderedDict()   # key -> size, LRU order (oldest first)
        self.version = {}
        self.max_size = max_size
        self.current = 0
        self.evicted = []

    def key_to_path(self, ks):
        return os.path.join(self.path, ks.replace("/", "-") + ".pt")

    def write_file(self, ks, data):
        path = self.key_to_path(ks)
        size = len(data)
        if size % self.os_disk_bs != 0 or not self.use_odirect:
            f = sc(f"open({path!r}, 'wb')", open, path, "wb")
            with f:
                sc(f"write({path!r}, {size} bytes)", f.write, data)
        else:
            buf = common.aligned_buffer(size)
            buf[:size] = data
            fd = sys_open(path, os.O_CREAT | os.O_WRONLY | O_DIRECT, 0o644)
            try:
                n = sc(f"write(fd of {path!r} O_DIRECT, {size} bytes)", os.write, fd,
                       memoryview(buf)[:size])
                self.ctx.check(n == size, f"O_DIRECT write of {path} wrote {n} of {size}")
            finally:
                common.sys_close(fd, path)
                buf.close()

    def read_file(self, ks, size):
        """Returns the bytes read, or None on FileNotFoundError (LMCache drops the key)."""
        path = self.key_to_path(ks)
        aligned = size % self.os_disk_bs == 0
        try:
            if not aligned or not self.use_odirect:
                buf = bytearray(size)
                with open(path, "rb") as f:
                    n = f.readinto(buf)
                return bytes(buf[:n])
            buf = common.aligned_buffer(size)
            fd = os.open(path, os.O_RDONLY | O_DIRECT)
            with os.fdopen(fd, "rb", buffering=0) as fdo:
                n = fdo.readinto(memoryview(buf)[:size])
            out = bytes(buf[:n])
            buf.close()
            return out
        except FileNotFoundError:
            return None
        except OSError as e:
            how = "open(O_RDONLY|O_DIRECT)+read" if aligned and self.use_odirect else \
                "open('rb')+readinto"
            raise ReplayFailure(f"{how} of {path!r} ({size} bytes) -> {common.errname(e.errno)}")

    def put(self, ks, data):
        """submit_put_task + async_save_bytes_to_disk: evict (LRU) until it fits, then write."""
        size = len(data)
        if ks in self.dict:
            self.dict.move_to_end(ks)
            return
        while self.current + size > self.max_size and self.dict:
            victim, vsize = self.dict.popitem(last=False)
            sc(f"unlink({self.key_to_path(victim)!r})", os.remove, self.key_to_path(victim))
            self.current -= vsize
            self.evicted.append(victim)
        self.current += size
        self.write_file(ks, data)
        self.dict[ks] = size
        self.version.setdefault(ks, 0)


def scenario(ctx):
    prompt_a = list(range(1000, 1000 + 12 * CHUNK_TOKENS + 37))
    prompt_b = prompt_a[:6 * CHUNK_TOKENS] + list(range(50000, 50000 + 6 * CHUNK_TOKENS + 37))
    prompt_c = list(range(90000, 90000 + 8 * CHUNK_TOKENS))
    backends = {}
    stored = {}   # (worker, ks) -> size

    with ctx.phase("init: makedirs + statvfs") as run:
        if run:
            for worker, odirect in ((0, False), (1, True)):
                backends[worker] = Backend(ctx, worker, odirect, max_size=64 << 20)
            st = common.sys_statvfs(ctx.root)
            ctx.check(st.f_bsize >= 512 and st.f_bsize & (st.f_bsize - 1) == 0,
                      f"statvfs f_bsize={st.f_bsize} is not a power of two >= 512")
            ctx.check(st.f_frsize > 0 and st.f_blocks > 0 and 0 <= st.f_bavail <= st.f_blocks,
                      f"statvfs looks wrong: f_frsize={st.f_frsize} f_blocks={st.f_blocks} "
                      f"f_bavail={st.f_bavail}")
            ctx.check((TOKEN_BYTES * CHUNK_TOKENS) % st.f_bsize == 0,
                      f"f_bsize {st.f_bsize} does not divide the full chunk size: the O_DIRECT "
                      f"path would never be taken")

    with ctx.phase("store prompts A and B (shared prefix stored once)", needs=("init: makedirs + statvfs",)) as run:
        if run:
            for prompt in (prompt_a, prompt_b):
                for worker, be in backends.items():
                    for h, size in chunk_hashes(prompt):
                        ks = key_string(worker, h)
                        be.put(ks, common.payload(ks, size))
                        stored[(worker, ks)] = size
            ctx.check(len(stored) == 2 * 20, f"expected 40 distinct chunks, stored {len(stored)}")

    store = "store prompts A and B (shared prefix stored once)"
    with ctx.phase("existence: hits and misses", needs=(store,)) as run:
        if run:
            for (worker, ks), size in stored.items():
                path = backends[worker].key_to_path(ks)
                ctx.check(common.exists(path), f"stat({path!r}) misses a stored chunk")
                st = common.sys_stat(path)
                ctx.check(st.st_size == size, f"stat({path!r}).st_size={st.st_size}, want {size}")
            for i in range(64):
                ks = key_string(i % 2, 0xdead0000 + i)
                path = backends[i % 2].key_to_path(ks)
                ctx.check(not common.exists(path), f"stat({path!r}) hits a never-stored chunk")
                ctx.check(backends[i % 2].read_file(ks, CHUNK_TOKENS * TOKEN_BYTES) is None,
                          f"open({path!r}, 'rb') of a never-stored chunk did not give ENOENT")

    with ctx.phase("retrieve byte-exact (buffered readinto, O_DIRECT readinto)", needs=(store,)) as run:
        if run:
            for (worker, ks), size in stored.items():
                got = backends[worker].read_file(ks, size)
                ctx.check(got is not None, f"read of stored {ks} gave ENOENT")
                common.check_bytes(f"read of {ks} (worker {worker})", got,
                                   common.payload(ks, size))

    with ctx.phase("overwrite existing keys (O_CREAT|O_WRONLY|O_DIRECT without O_TRUNC; 'wb')", needs=(store,)) as run:
        if run:
            for worker, be in backends.items():
                for h, size in chunk_hashes(prompt_a)[2:5]:
                    ks = key_string(worker, h)
                    path = be.key_to_path(ks)
                    # another (buffered) instance reads it first: the old chunk is in the page
                    # cache when the in-place overwrite comes
                    with open(path, "rb") as f:
                        common.check_bytes(f"buffered read of {ks} before overwrite", f.read(),
                                           common.payload(ks, size, be.version.get(ks, 0)))
                    be.version[ks] = 1
                    be.write_file(ks, common.payload(ks, size, 1))
                    got = be.read_file(ks, size)
                    ctx.check(got is not None, f"{ks} vanished after overwrite")
                    common.check_bytes(f"re-read of overwritten {ks}", got,
                                       common.payload(ks, size, 1))
                    with open(path, "rb") as f:
                        common.check_bytes(f"buffered re-read of {ks} after the overwrite "
                                           f"(stale page cache?)", f.read(),
                                           common.payload(ks, size, 1))

    with ctx.phase("reader during an in-place O_DIRECT overwrite sees the old chunk until close", needs=(store,), kvfs_only=True) as run:
        if run:
            # On ext4 this reader may see a torn chunk; kvfs keeps a file private to its writer
            # until close (DESIGN.md section 3), so the reader sees the old version.
            be = backends[1]
            h, size = chunk_hashes(prompt_a)[7]
            ks = key_string(1, h)
            path = be.key_to_path(ks)
            old = common.payload(ks, size, be.version.get(ks, 0))
            new = common.payload(ks, size, 7)
            buf = common.aligned_buffer(size)
            buf[:size] = new
            wfd = sys_open(path, os.O_CREAT | os.O_WRONLY | O_DIRECT, 0o644)
            try:
                common.sys_pwrite_all(wfd, memoryview(buf)[:size // 2], 0, path, True)
                with open(path, "rb") as f:           # a reader arriving mid-write
                    during = f.read()
                common.check_bytes(f"read of {ks} while its overwrite is open", during, old)
                common.sys_pwrite_all(wfd, memoryview(buf)[size // 2:size], size // 2, path, True)
            finally:
                common.sys_close(wfd, path)
                buf.close()
            be.version[ks] = 7
            common.check_bytes(f"read of {ks} after the overwrite closed", be.read_file(ks, size),
                               new)

    with ctx.phase("eviction (max_local_disk_size reached: LRU os.remove)", needs=(store,)) as run:
        if run:
            for be in backends.values():
                be.max_size = be.current + 4 * CHUNK_TOKENS * TOKEN_BYTES  # room for 4 more
            for worker, be in backends.items():
                for h, size in chunk_hashes(prompt_c):
                    ks = key_string(worker, h)
                    be.put(ks, common.payload(ks, size))
                    stored[(worker, ks)] = size
                ctx.check(len(be.evicted) >= 4, f"worker {worker}: expected evictions, got "
                                                f"{len(be.evicted)}")
                for ks in be.evicted:
                    stored.pop((worker, ks), None)
                    path = be.key_to_path(ks)
                    ctx.check(not common.exists(path), f"evicted {path!r} still exists")
                    ctx.check(be.read_file(ks, 1 << 20) is None,
                              f"open of evicted {path!r} did not give ENOENT")
            names = set(common.sys_listdir(ctx.root))
            want = {os.path.basename(backends[w].key_to_path(ks)) for (w, ks) in stored}
            ctx.check(names == want, f"readdir: {len(names - want)} unexpected, "
                                     f"{len(want - names)} missing names")
            for (worker, ks), size in stored.items():
                got = backends[worker].read_file(ks, size)
                ctx.check(got is not None, f"{ks} lost after evictions")
                common.check_bytes(f"read of {ks} after evictions", got,
                                   common.payload(ks, size, backends[worker].version.get(ks, 0)))

    with ctx.phase("restart keeps every published chunk", needs=(store,), restart=True) as run:
        if run:
            ctx.remount()
            for (worker, ks), size in stored.items():
                be = backends[worker]
                got = be.read_file(ks, size)
                ctx.check(got is not None, f"{ks} missing after restart")
                common.check_bytes(f"read of {ks} after restart", got,
                                   common.payload(ks, size, be.version.get(ks, 0)))
            for worker, be in backends.items():
                for ks in be.evicted:
                    ctx.check(not common.exists(be.key_to_path(ks)),
                              f"evicted {ks} came back after restart")


if __name__ == "__main__":
    sys.exit(common.main("lmcache_local_disk", scenario))
