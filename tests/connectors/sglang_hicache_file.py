#!/usr/bin/env python3
"""Replay of SGLang HiCache's file storage backend (HiCacheFile) and its LRU file evictor.

Upstream (read with the search tool): sgl-project/sglang
  python/sglang/srt/mem_cache/hicache_storage.py  class HiCacheFile
    __init__      dir = SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR; tp_rank 0: os.path.exists /
                  os.makedirs; config_suffix "_<model with / -> ->_<tp_rank>_<tp_size>"
    set           exists(key) (os.path.exists) -> already stored: touch, skip;
                  tmp = f"{path}.tmp.{os.getpid()}.{threading.get_ident()}.{uuid4().hex}";
                  numpy tofile(tmp) (open "wb" + write); os.replace(tmp, path) (no fsync)
    get           open(path, "rb", buffering=0).readinto(page buffer) == page size, else error;
                  FileNotFoundError -> None (miss)
    exists / batch_exists   one os.path.exists per page, stop at the first miss
    batch_exists_v2 (no metadata cache)  os.scandir(dir) of the whole flat directory;
                  entry.is_file() and entry.name in the wanted set; side pools (e.g. SWA) are
                  "<key>.<pool><suffix>.bin" with a trailing-pages hit policy
    clear         os.listdir; os.path.isfile; os.remove each
  python/sglang/srt/mem_cache/storage/file/lru_file_evictor.py  class LRUFileEvictor
    _fs_stats     os.statvfs: f_blocks * f_frsize (total), f_bavail * f_frsize (free)
    _scan_existing_files  os.listdir + os.stat each "*.bin" of this rank: (st_mtime, st_size),
                  oldest first -> LRU order and byte total
    _evict_one_lru_locked os.remove(oldest); FileNotFoundError tolerated
    touch         os.path.getsize for untracked files
Scaled: 256 KiB pages (64 tokens), two TP ranks in one flat directory, ~130 files.
"""

import errno
import hashlib
import os
import sys
import threading
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import ReplayFailure, sc  # noqa: E402

MODEL = "Qwen/Qwen3-32B"
PAGE_BYTES = 256 << 10


def page_keys(tokens, page=64, prev=""):
    keys = []
    for i in range(0, len(tokens) - len(tokens) % page, page):
        prev = hashlib.sha256((prev + ",".join(map(str, tokens[i:i + page]))).encode()).hexdigest()
        keys.append(prev)
    return keys


class HiCacheFile:
    def __init__(self, ctx, file_path, tp_rank, tp_size=2):
        self.ctx, self.file_path, self.tp_rank = ctx, file_path, tp_rank
        self.config_suffix = f"_{MODEL.replace('/', '-')}_{tp_rank}_{tp_size}"
        if not common.exists(self.file_path) and tp_rank == 0:
            sc(f"mkdir {file_path}", os.makedirs, self.file_path)

    def suffixed(self, key, component=None):
        return (key if component is None else f"{key}.{component}") + self.config_suffix

    def path(self, key, component=None):
        return os.path.join(self.file_path, f"{self.suffixed(key, component)}.bin")

    def exists(self, key, component=None):
        return common.exists(self.path(key, component))

    def set(self, key, value, component=None):
        path = self.path(key, component)
        if self.exists(key, component):
            sc(f"stat({path!r}) (touch)", os.path.getsize, path)
            return "skipped"
        tmp = f"{path}.tmp.{os.getpid()}.{threading.get_ident()}.{uuid.uuid4().hex}"
        try:
            with open(tmp, "wb") as f:             # numpy.ndarray.tofile
                f.write(value)
            os.replace(tmp, path)
        except OSError as e:
            try:
                os.remove(tmp)
            except OSError:
                pass
            raise ReplayFailure(f"set {os.path.basename(path)}: open({tmp!r}, 'wb')/write/"
                                f"rename -> {common.errname(e.errno)}")
        return "stored"

    def get(self, key, size=PAGE_BYTES, component=None):
        path = self.path(key, component)
        buf = bytearray(size)
        try:
            with open(path, "rb", buffering=0) as f:
                n = f.readinto(buf)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise ReplayFailure(f"open({path!r}, 'rb', buffering=0).readinto -> "
                                f"{common.errname(e.errno)}")
        if n != size:
            raise ReplayFailure(f"short read for {os.path.basename(path)}: {n} of {size} "
                                f"(one read(2) of the page size)")
        return bytes(buf)

    def batch_exists(self, keys):
        for i, k in enumerate(keys):
            if not self.exists(k):
                return i
        return len(keys)

    def batch_exists_v2(self, keys, side_pool=None, trailing=1):
        targets = {f"{self.suffixed(k)}.bin" for k in keys}
        if side_pool:
            targets |= {f"{self.suffixed(k, side_pool)}.bin" for k in keys}
        existing = set()
        with os.scandir(self.file_path) as entries:
            for entry in entries:
                if entry.is_file() and entry.name in targets:
                    existing.add(entry.name)
        kv = next((i for i, k in enumerate(keys) if f"{self.suffixed(k)}.bin" not in existing),
                  len(keys))
        if not side_pool:
            return kv
        for prefix_len in range(kv, 0, -1):
            if all(f"{self.suffixed(keys[i], side_pool)}.bin" in existing
                   for i in range(max(0, prefix_len - trailing), prefix_len)):
                return prefix_len
        return 0

    def clear(self):
        for name in common.sys_listdir(self.file_path):
            p = os.path.join(self.file_path, name)
            if os.path.isfile(p):
                common.sys_unlink(p)


class LRUFileEvictor:
    def __init__(self, backend, max_size):
        self.b, self.max_size = backend, max_size
        st = common.sys_statvfs(backend.file_path)
        self.total, self.free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        entries = []
        for fn in common.sys_listdir(backend.file_path):
            if not fn.endswith(".bin") or not fn[:-4].endswith(backend.config_suffix):
                continue
            st = sc(f"stat({fn!r})", os.stat, os.path.join(backend.file_path, fn),
                    expect=(errno.ENOENT,))
            if isinstance(st, OSError):
                continue
            entries.append((st.st_mtime, fn[:-4], st.st_size))
        entries.sort(key=lambda e: e[0])
        self.lru = [(stem, size) for _, stem, size in entries]
        self.total_bytes = sum(size for _, size in self.lru)

    def reserve(self, n):
        evicted = []
        while self.lru and self.total_bytes + n > self.max_size:
            stem, size = self.lru.pop(0)
            sc(f"unlink({stem}.bin)", os.remove, os.path.join(self.b.file_path, f"{stem}.bin"),
               expect=(errno.ENOENT,))
            self.total_bytes -= size
            evicted.append(stem)
        self.total_bytes += n
        return evicted


def scenario(ctx):
    req1 = list(range(10_000, 10_000 + 32 * 64))
    req2 = req1[:16 * 64] + list(range(70_000, 70_000 + 16 * 64))
    k1, k2 = page_keys(req1), page_keys(req2)
    ranks = {}
    stored = {}     # (rank, key, component) -> bytes

    def val(rank, key, comp=None):
        return common.payload(f"{rank}|{key}|{comp}", PAGE_BYTES)

    with ctx.phase("init: makedirs, statvfs") as run:
        if run:
            for r in (0, 1):
                ranks[r] = HiCacheFile(ctx, ctx.root, r)
            st = common.sys_statvfs(ctx.root)
            ctx.check(st.f_blocks * st.f_frsize > 0 and st.f_bavail <= st.f_blocks,
                      f"statvfs: f_blocks={st.f_blocks} f_bavail={st.f_bavail} "
                      f"f_frsize={st.f_frsize}")
    init = "init: makedirs, statvfs"

    with ctx.phase("set: exists? then tmp.<pid>.<tid>.<uuid> + os.replace (2 ranks in parallel)", needs=(init,)) as run:
        if run:
            def backup(r):
                b, out = ranks[r], []
                for keys in (k1, k2):
                    for k in keys:
                        out.append(b.set(k, val(r, k)))
                        stored[(r, k, None)] = val(r, k)
                    for k in keys[-2:]:                    # SWA side pool: trailing pages
                        b.set(k, val(r, k, "swa"), "swa")
                        stored[(r, k, "swa")] = val(r, k, "swa")
                return out
            res = common.pmap(backup, (0, 1), workers=2)
            for r, out in zip((0, 1), res):
                ctx.check(out.count("skipped") == 16, f"rank {r}: the 16 shared prefix pages "
                                                      f"were not skipped ({out.count('skipped')})")
            names = common.sys_listdir(ctx.root)
            ctx.check(not any(".tmp." in n for n in names), "temp files left behind")
            ctx.check(len(names) == len(stored), f"{len(names)} files, want {len(stored)}")
    setp = "set: exists? then tmp.<pid>.<tid>.<uuid> + os.replace (2 ranks in parallel)"

    with ctx.phase("statvfs: kvfs capacity; f_bavail follows writes and unlinks (min_free_space)", needs=(init,), kvfs_only=True) as run:
        if run:
            def free_total():
                st = common.sys_statvfs(ctx.root)
                return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
            cap = ctx.capacity_bytes
            free0, total = free_total()
            ctx.check(cap // 2 <= total <= cap * 1.05,
                      f"statvfs total f_blocks*f_frsize = {total} for --capacity {cap}")
            b = ranks[0]
            extra = [f"{i:064x}" for i in range(16)]
            for k in extra:
                b.set(k, common.payload(k, 1 << 20), "free")
            free1, _ = free_total()
            ctx.check(free0 - free1 >= 8 << 20, f"16 MiB written but f_bavail*f_frsize fell by "
                                                f"{(free0 - free1) >> 20} MiB")
            for k in extra:
                common.sys_unlink(b.path(k, "free"))
            free2, _ = free_total()
            ctx.check(free2 - free1 >= 8 << 20, f"16 MiB unlinked but f_bavail*f_frsize rose by "
                                                f"{(free2 - free1) >> 20} MiB (SGLang's "
                                                f"min_free_space eviction counts on it)")

    with ctx.phase("batch_exists: stat per page up to the first miss; many distinct misses", needs=(setp,)) as run:
        if run:
            for r, b in ranks.items():
                ctx.check(b.batch_exists(k1) == len(k1), f"rank {r}: request 1 not all hits")
                ctx.check(b.batch_exists(k2) == len(k2), f"rank {r}: request 2 not all hits")
                k3 = k1[:10] + page_keys(list(range(5, 5 + 20 * 64)), prev="x")
                ctx.check(b.batch_exists(k3) == 10, f"rank {r}: prefix did not stop at 10")
                misses = page_keys(list(range(300 * 64)), prev=f"miss{r}")
                ctx.check(sum(b.exists(k) for k in misses) == 0, "a never-stored page exists")

    with ctx.phase("batch_exists_v2: scandir of the flat directory, SWA trailing pages", needs=(setp,)) as run:
        if run:
            for r, b in ranks.items():
                ctx.check(b.batch_exists_v2(k1) == len(k1), f"rank {r}: scandir prefix wrong")
                ctx.check(b.batch_exists_v2(k1, "swa", trailing=2) == len(k1),
                          f"rank {r}: SWA trailing pages not found")
                ctx.check(b.batch_exists_v2(k1[:20], "swa", trailing=2) == 0,
                          f"rank {r}: SWA found where it was never stored")

    with ctx.phase("get: open 'rb' unbuffered, one readinto of the page, byte-exact", needs=(setp,)) as run:
        if run:
            def chk(item):
                (r, k, comp), want = item
                common.check_bytes(f"rank {r} page {k[:12]} {comp or ''}",
                                   ranks[r].get(k, component=comp), want)
            common.pmap(chk, list(stored.items()), workers=2)
            ctx.check(ranks[0].get("0" * 64) is None, "get of a missing page did not miss")

    with ctx.phase("restart keeps every page", needs=(setp,), restart=True) as run:
        if run:
            ctx.remount()
            for (r, k, comp), want in stored.items():
                got = ranks[r].get(k, component=comp)
                ctx.check(got is not None, f"rank {r} page {k[:12]} missing after restart")
                common.check_bytes(f"rank {r} page {k[:12]} after restart", got, want)

    with ctx.phase("kill -9 after the sets (SGLang never fsyncs) keeps every page", needs=(setp,), restart=True) as run:
        if run:
            ctx.crash_restart()
            lost = 0
            for (r, k, comp), want in stored.items():
                got = ranks[r].get(k, component=comp)
                if got is None and ctx.durability_async:
                    lost += 1          # durability=async: a crash may lose recent pages
                    continue
                ctx.check(got is not None, f"rank {r} page {k[:12]} missing after kill -9")
                common.check_bytes(f"rank {r} page {k[:12]} after kill -9", got, want)
            ctx.check(not any(".tmp." in n for n in common.sys_listdir(ctx.root)),
                      "temp files reappeared after kill -9")
            if lost:
                ctx.note(f"durability=async: {lost} pages lost by the kill -9 (allowed)")

    restart = "restart keeps every page"
    with ctx.phase("LRU evictor: listdir + stat scan (mtime order), os.remove oldest", needs=(setp, restart)) as run:
        if run:
            b = ranks[0]
            ev = LRUFileEvictor(b, max_size=0)
            mine = [key for key in stored if key[0] == 0]
            ctx.check(len(ev.lru) == len(mine), f"scan found {len(ev.lru)} rank-0 files, want "
                                                f"{len(mine)}")
            ctx.check(ev.total_bytes == len(mine) * PAGE_BYTES, "scan byte total wrong")
            ev.max_size = ev.total_bytes - 10 * PAGE_BYTES
            victims = ev.reserve(PAGE_BYTES)
            ctx.check(len(victims) == 11, f"evicted {len(victims)} pages, want 11")
            for stem in victims:
                ctx.check(not common.exists(os.path.join(b.file_path, f"{stem}.bin")),
                          f"evicted {stem} still exists")
            for stem, _ in ev.lru:
                ctx.check(common.exists(os.path.join(b.file_path, f"{stem}.bin")),
                          f"a page that was not evicted is gone: {stem}")
            ctx.check(sum(1 for k in stored if k[0] == 1 and ranks[1].exists(k[1], k[2]))
                      == len(stored) - len(mine), "rank 1 pages were touched by rank 0's evictor")

    with ctx.phase("clear: listdir, isfile, remove", needs=(init, restart)) as run:
        if run:
            for b in ranks.values():
                b.clear()
            ctx.check(common.sys_listdir(ctx.root) == [], "directory not empty after clear()")
            ctx.check(ranks[0].batch_exists(k1) == 0, "page found after clear()")


if __name__ == "__main__":
    sys.exit(common.main("sglang_hicache_file", scenario))
