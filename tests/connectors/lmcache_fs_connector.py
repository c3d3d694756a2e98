#!/usr/bin/env python3
"""Replay of LMCache's remote file-system connector (remote_url "fs://...") file I/O.

Upstream (read with the search tool): LMCache/LMCache
  lmcache/v1/storage_backend/connector/fs_connector.py  class FSConnector
    __init__                 base paths from a comma-separated list; Path.mkdir(parents=True,
                             exist_ok=True) for each; with relative_tmp_dir also
                             (base / relative_tmp_dir).mkdir(parents=False, exist_ok=True)
    _get_base_path           abs(key.chunk_hash) % len(base_paths)
    _get_file_name           key.to_string().replace("/", "-") + ".data"
    _get_file_and_tmp_path   tmp = base/relative_tmp_dir/<name>  (rename across directories)
                             or file_path.with_suffix(".tmp")    (same directory)
    put                      aiofiles.open(tmp, "wb"): write 28-byte RemoteMetadata, then the
                             chunk; aiofiles.os.replace(tmp, final) (over a possibly existing
                             final; no fsync); on error: exists(tmp) -> unlink(tmp)
    exists / exists_sync     os.path.exists(final)   (one stat per chunk)
    batched_async_contains   gather(exists(k) for k in keys) -> index of the first False
    get                      open(final, "rb"); readinto(28-byte header); readinto(buffer of
                             the size in the header)  [save_chunk_meta]; or readinto(a buffer
                             of a full chunk) that may read less (partial last chunk)
    list                     base_path.glob("*.data")
    remove_sync              os.remove(final)
  lmcache/utils.py CacheEngineKey.to_string  fmt@model@world_size@worker_id@hash:x@dtype
Two configurations are replayed: one base path with "<name>.tmp" temp files, and two base paths
with relative_tmp_dir=".lmcache_tmp". Puts and gets run on a thread pool like aiofiles does.
"""

import errno
import hashlib
import os
import struct
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import ReplayFailure, sc  # noqa: E402

MODEL = "Qwen/Qwen3-8B"
METADATA_BYTES_LEN = 28
FULL = 1 << 20          # 256 tokens x 4 KiB (scaled)
PARTIAL = 91 * 4096 + 1000


class Key:
    def __init__(self, chunk_hash, worker=0):
        self.chunk_hash, self.worker = chunk_hash, worker

    def to_string(self):
        return f"vllm@{MODEL}@1@{self.worker}@{self.chunk_hash:x}@bfloat16"


def metadata(length, fmt=1):
    # RemoteMetadata(length, shape, dtype, fmt).serialize(): 7 little-endian int32 = 28 bytes
    return struct.pack("<7i", length, 2, 32, 256, length // (2 * 32 * 256 * 2) or 1, 5, fmt)


class FSConnector:
    def __init__(self, ctx, base_paths_str, relative_tmp_dir=None, save_chunk_meta=True):
        self.ctx = ctx
        self.base_paths = [Path(p.strip()) for p in base_paths_str.split(",")]
        self.relative_tmp_dir = Path(relative_tmp_dir) if relative_tmp_dir else None
        self.save_chunk_meta = save_chunk_meta
        for p in self.base_paths:
            sc(f"mkdir -p {p}", p.mkdir, parents=True, exist_ok=True)
            if self.relative_tmp_dir is not None:
                sc(f"mkdir {p / self.relative_tmp_dir}", (p / self.relative_tmp_dir).mkdir,
                   parents=False, exist_ok=True)

    def _base(self, key):
        return self.base_paths[abs(key.chunk_hash) % len(self.base_paths)]

    def file_path(self, key):
        return self._base(key) / (key.to_string().replace("/", "-") + ".data")

    def file_and_tmp(self, key):
        fp = self.file_path(key)
        if self.relative_tmp_dir is not None:
            return fp, self._base(key) / self.relative_tmp_dir / fp.name
        return fp, fp.with_suffix(".tmp")

    def exists(self, key):
        return common.exists(self.file_path(key))

    def put(self, key, data, tolerate_enoent=False):
        final, tmp = self.file_and_tmp(key)
        try:
            with open(tmp, "wb") as f:
                if self.save_chunk_meta:
                    f.write(metadata(len(data)))
                f.write(data)
            os.replace(tmp, final)
        except OSError as e:
            # FSConnector.put: log, remove the temp file if it exists, re-raise.
            if os.path.exists(tmp):
                os.unlink(tmp)
            if tolerate_enoent and e.errno == errno.ENOENT:
                return False   # a concurrent writer of the same key renamed the shared tmp
            raise ReplayFailure(f"put {final.name}: open({str(tmp)!r}, 'wb')/write/"
                                f"rename(tmp, {str(final)!r}) -> {common.errname(e.errno)}")
        return True

    def get(self, key, full_size=FULL):
        path = self.file_path(key)
        try:
            with open(path, "rb") as f:
                if self.save_chunk_meta:
                    md = bytearray(METADATA_BYTES_LEN)
                    n = f.readinto(md)
                    self.ctx.check(n == METADATA_BYTES_LEN, f"partial metadata read of {path}")
                    length = struct.unpack("<7i", md)[0]
                    buf = bytearray(length)
                    n = f.readinto(buf)
                    self.ctx.check(n == length, f"partial data read of {path}: {n} of {length}")
                    return bytes(buf)
                buf = bytearray(full_size)
                n = f.readinto(buf)
                return bytes(buf[:n])
        except FileNotFoundError:
            return None
        except OSError as e:
            raise ReplayFailure(f"open({str(path)!r}, 'rb')+readinto -> "
                                f"{common.errname(e.errno)}")

    def batched_contains(self, keys):
        results = common.pmap(self.exists, keys, workers=8)
        return results.index(False) if False in results else len(results)

    def list(self):
        keys = []
        for base in self.base_paths:
            keys.extend(f.stem for f in base.glob("*.data"))
        return keys

    def remove_sync(self, key):
        sc(f"unlink({str(self.file_path(key))!r})", os.remove, self.file_path(key))


def prompt_keys(seed, n_full, partial=True):
    keys, prev = [], seed
    for i in range(n_full + (1 if partial else 0)):
        prev = hashlib.sha256(f"{prev}|{i}".encode()).hexdigest()
        keys.append((Key(int(prev[:15], 16)), FULL if i < n_full else PARTIAL))
    return keys


def scenario(ctx):
    root = ctx.root
    configs = {
        "same-dir .tmp": dict(base_paths_str=os.path.join(root, "fs1")),
        "tmp sub-directory, 2 base paths": dict(
            base_paths_str=f"{os.path.join(root, 'fsA')}, {os.path.join(root, 'fsB')}",
            relative_tmp_dir=".lmcache_tmp"),
    }
    conns, stored = {}, {}

    with ctx.phase("init: mkdir -p base paths (+ tmp sub-directory)") as run:
        if run:
            for name, kw in configs.items():
                conns[name] = FSConnector(ctx, **kw)
    init = "init: mkdir -p base paths (+ tmp sub-directory)"

    with ctx.phase("put: temp file + os.replace, on a thread pool", needs=(init,)) as run:
        if run:
            for name, conn in conns.items():
                keys = prompt_keys(name, 14)
                common.pmap(lambda ks: conn.put(ks[0], common.payload(ks[0].to_string(), ks[1])),
                            keys, workers=4)
                stored[name] = [(k, size, 0) for k, size in keys]
                tmpdir = conn.base_paths[0] / conn.relative_tmp_dir if conn.relative_tmp_dir \
                    else None
                if tmpdir is not None:
                    left = common.sys_listdir(tmpdir)
                    ctx.check(left == [], f"temp sub-directory not empty after puts: {left[:3]}")
                for base in conn.base_paths:
                    tmps = [n for n in common.sys_listdir(base) if n.endswith(".tmp")]
                    ctx.check(tmps == [], f"temp files left in {base}: {tmps[:3]}")
    put = "put: temp file + os.replace, on a thread pool"

    with ctx.phase("batched_async_contains: prefix hits, then first miss", needs=(put,)) as run:
        if run:
            for name, conn in conns.items():
                keys = [k for k, *_ in stored[name]]
                ctx.check(conn.batched_contains(keys) == len(keys),
                          f"{name}: not every stored chunk is found")
                missing = [k for k, _ in prompt_keys(name + "-other", 30)]
                ctx.check(conn.batched_contains(keys[:5] + missing) == 5,
                          f"{name}: prefix lookup did not stop at the first miss")
                ctx.check(conn.batched_contains(missing) == 0, f"{name}: a miss was found")

    with ctx.phase("get: 28-byte header then data, byte-exact", needs=(put,)) as run:
        if run:
            for name, conn in conns.items():
                def check(ks):
                    got = conn.get(ks[0])
                    ctx.check(got is not None, f"{name}: get of stored {ks[0].to_string()} "
                                               f"gave ENOENT")
                    common.check_bytes(f"{name}: get {ks[0].to_string()}", got,
                                       common.payload(ks[0].to_string(), ks[1], ks[2]))
                common.pmap(check, stored[name], workers=4)
                ctx.check(conn.get(Key(0x5eed)) is None, "get of a missing key did not miss")

    with ctx.phase("get without chunk metadata: full-chunk buffer, short read of the last chunk", needs=(init,)) as run:
        if run:
            conn = FSConnector(ctx, os.path.join(root, "fs-nometa"), save_chunk_meta=False)
            keys = prompt_keys("nometa", 3)
            for k, size in keys:
                conn.put(k, common.payload(k.to_string(), size))
            for k, size in keys:
                got = conn.get(k, full_size=FULL)
                common.check_bytes(f"no-meta get {k.to_string()}", got,
                                   common.payload(k.to_string(), size))

    with ctx.phase("list: glob *.data", needs=(put,)) as run:
        if run:
            for name, conn in conns.items():
                want = {k.to_string().replace("/", "-") for k, *_ in stored[name]}
                got = set(conn.list())
                ctx.check(got == want, f"{name}: glob found {len(got)} names, want {len(want)}; "
                                       f"extra {sorted(got - want)[:2]}, "
                                       f"missing {sorted(want - got)[:2]}")

    with ctx.phase("overwrite: put again over existing files (rename onto a target)", needs=(put,)) as run:
        if run:
            for name, conn in conns.items():
                for i, (k, size, _) in enumerate(stored[name][:4]):
                    data = common.payload(k.to_string(), size, 1)
                    conn.put(k, data)
                    common.check_bytes(f"{name}: get after overwrite", conn.get(k), data)
                    stored[name][i] = (k, size, 1)

    with ctx.phase("an open reader keeps the old version while a put replaces the key", needs=(put,)) as run:
        if run:
            conn = conns["same-dir .tmp"]
            k, size, ver = stored["same-dir .tmp"][6]  # (key, size, version)
            old = common.payload(k.to_string(), size, ver)
            path = conn.file_path(k)
            with sc(f"open({str(path)!r}, 'rb')", open, path, "rb", buffering=0) as f:
                first = sc(f"read({str(path)!r})", f.read, METADATA_BYTES_LEN + size // 2)
                new = common.payload(k.to_string(), size, 2)
                common.pmap(lambda _: conn.put(k, new), [0], 1)   # another worker's put
                rest = sc(f"read({str(path)!r}) after the name was replaced", f.read)
            common.check_bytes("old version read across a replace", (first + rest)[28:], old)
            common.check_bytes("get after the replace", conn.get(k), new)
            stored["same-dir .tmp"][6] = (k, size, 2)

    with ctx.phase("two writers race on the same key (shared temp name)", needs=(init,)) as run:
        if run:
            conn = conns["same-dir .tmp"]
            k = Key(0xabcdef12345)
            data = common.payload(k.to_string(), FULL)
            for _ in range(4):
                common.pmap(lambda _: conn.put(k, data, tolerate_enoent=True), range(2), 2)
            common.check_bytes("raced key", conn.get(k), data)
            conn.remove_sync(k)

    with ctx.phase("remove_sync, then lookups miss", needs=(put,)) as run:
        if run:
            for name, conn in conns.items():
                victims = stored[name][-3:]
                for k, *_ in victims:
                    conn.remove_sync(k)
                    ctx.check(not conn.exists(k), f"{name}: removed key still exists")
                    ctx.check(conn.get(k) is None, f"{name}: removed key still readable")
                stored[name] = stored[name][:-3]

    with ctx.phase("restart keeps every published chunk", needs=(put,), restart=True) as run:
        if run:
            ctx.remount()
            for name, conn in conns.items():
                for k, size, ver in stored[name]:
                    got = conn.get(k)
                    ctx.check(got is not None, f"{name}: {k.to_string()} missing after restart")
                    common.check_bytes(f"{name}: {k.to_string()} after restart", got,
                                       common.payload(k.to_string(), size, ver))
                ctx.check(len(conn.list()) == len(stored[name]),
                          f"{name}: glob after restart found {len(conn.list())} files, "
                          f"want {len(stored[name])}")


if __name__ == "__main__":
    sys.exit(common.main("lmcache_fs_connector", scenario))
