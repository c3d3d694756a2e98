#!/usr/bin/env python3
"""Replay of vLLM's native file-system KV offloading tier (OffloadingConnector, fs tier).

Upstream (read with the search tool): vllm-project/vllm
  vllm/v1/kv_offload/tiering/fs/file_mapper.py  FileMapper
      base path  <root>/<model with "/" -> "_">_<sha256(canonical json of the run fields)[:12]>
      write_run_config  os.makedirs(base); os.path.exists(base/config.json) or json.dump
      get_file_name     <base>_r<rank>/<hash[:3]>/<hash[3:5]>_g<group>/<hash>.bin
  vllm/v1/kv_offload/tiering/fs/io.py
      _get_tmp_suffix   one "_<random 63-bit>.tmp" suffix per thread
      probe_o_direct    in the config dir: os.open(".o_direct_probe_<r>.tmp",
                        O_CREAT|O_WRONLY|O_TRUNC|O_DIRECT, 0o644); write one page; close; remove
      store_block       os.path.exists(dest) -> skip; os.makedirs(dirname, exist_ok=True);
                        os.open(dest + suffix, O_CREAT|O_EXCL|O_WRONLY|O_TRUNC|O_DIRECT, 0o644);
                        os.write(block slice of the pinned KV buffer); short write -> error;
                        os.close; os.replace(tmp, dest); any error -> os.remove(tmp), raise
      load_block        os.open(src, O_RDONLY|O_DIRECT); os.readv(fd, [block slice]);
                        short read -> error; any error -> os.remove(src) (the bad block is
                        dropped and recomputed)
  vllm/v1/kv_offload/tiering/fs/manager.py  FileSystemTierManager
      lookup via os.path.exists (or the C batch_lookup: faccessat(F_OK)), 16+16 I/O threads
  vllm/v1/kv_offload/tiering/fs/evictor.py  LRUEvictor._acquire_slots: os.remove(evicted);
      _complete_store: os.path.exists(file) to reconcile
Scaled: a 512 KiB offloaded block (4 KiB-aligned slices of one page-aligned KV buffer), 48
blocks, 4 store/load threads.
"""

import hashlib
import json
import os
import random
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import O_DIRECT, ReplayFailure, sc, sys_open  # noqa: E402

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
BLOCK = 512 << 10
NBLOCKS = 48

_tls = threading.local()


def tmp_suffix():
    try:
        return _tls.suffix
    except AttributeError:
        _tls.suffix = f"_{random.randint(0, 2 ** 63 - 1)}.tmp"
        return _tls.suffix


class FileMapper:
    def __init__(self, root, rank=0):
        self.rank = rank
        self.fields = {"model_name": MODEL, "hash_block_size": 16, "gpu_blocks_per_file": 4,
                       "tp_size": 1, "pp_size": 1, "pcp_size": 1, "dcp_size": 1,
                       "dtype": "bfloat16", "kv_cache_groups": [], "inference_engine": "vllm"}
        canon = json.dumps(self.fields, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(canon.encode()).hexdigest()[:12]
        self.base_path = f"{root}/{MODEL.replace('/', '_')}_{digest}"

    def get_file_name(self, hash_hex, group=0):
        return (f"{self.base_path}_r{self.rank}/{hash_hex[:3]}/{hash_hex[3:5]}_g{group}/"
                f"{hash_hex}.bin")

    def write_run_config(self):
        common.sys_makedirs(self.base_path)
        target = os.path.join(self.base_path, "config.json")
        if common.exists(target):
            return
        with sc(f"open({target!r}, 'w')", open, target, "w") as f:
            json.dump(self.fields, f, indent=2, sort_keys=True)


def probe_o_direct(directory):
    path = os.path.join(directory, f".o_direct_probe{tmp_suffix()}")
    page = common.aligned_buffer(common.PAGE)
    try:
        fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC | O_DIRECT, 0o644)
        try:
            os.write(fd, page)
        finally:
            os.close(fd)
        return True, None
    except OSError as e:
        return False, e
    finally:
        page.close()
        try:
            os.remove(path)
        except OSError:
            pass


def store_block(dest, view, offset, use_o_direct=True):
    if common.exists(dest):
        return False
    tmp = dest + tmp_suffix()
    common.sys_makedirs(os.path.dirname(dest))
    flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_TRUNC | (O_DIRECT if use_o_direct else 0)
    try:
        fd = sys_open(tmp, flags, 0o644)
        try:
            n = sc(f"write(fd of {tmp!r} {common.flagstr(flags)}, {BLOCK} bytes)", os.write, fd,
                   view[offset:offset + BLOCK])
            if n < BLOCK:
                raise ReplayFailure(f"short write to {tmp}: {n} of {BLOCK}")
        finally:
            os.close(fd)
        common.sys_rename(tmp, dest)   # os.replace
    except Exception:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    return True


def load_block(src, view, offset, use_o_direct=True):
    fd = None
    flags = os.O_RDONLY | (O_DIRECT if use_o_direct else 0)
    try:
        fd = sys_open(src, flags)
        n = sc(f"readv(fd of {src!r} {common.flagstr(flags)}, {BLOCK} bytes)", os.readv, fd,
               [view[offset:offset + BLOCK]])
        if n < BLOCK:
            raise ReplayFailure(f"short read: expected {BLOCK} bytes, read {n} from {src}")
    except Exception:
        try:
            os.remove(src)
        except OSError:
            pass
        raise
    finally:
        if fd is not None:
            os.close(fd)


def block_hash(i, salt="req"):
    return hashlib.sha256(f"{salt}|{i}".encode()).hexdigest()   # 32-byte block hash, hex


def scenario(ctx):
    fm = FileMapper(ctx.root)
    use_direct = [True]
    primary = common.aligned_buffer(NBLOCKS * BLOCK)     # the pinned CPU KV cache
    pview = memoryview(primary)
    hashes = [block_hash(i) for i in range(NBLOCKS)]
    for i, h in enumerate(hashes):
        pview[i * BLOCK:(i + 1) * BLOCK] = common.payload(h, BLOCK)
    live = set()

    with ctx.phase("init: config.json, O_DIRECT probe") as run:
        if run:
            fm.write_run_config()
            fm.write_run_config()    # second worker: exists -> no-op
            ok, err = probe_o_direct(fm.base_path)
            if not ok:
                use_direct[0] = False
                raise ReplayFailure(f"O_DIRECT probe (open O_CREAT|O_WRONLY|O_TRUNC|O_DIRECT + "
                                    f"one-page write) failed: {common.errname(err.errno)}; vLLM "
                                    f"falls back to buffered I/O")
            ctx.check(not any(n.startswith(".o_direct_probe") for n in
                              common.sys_listdir(fm.base_path)), "probe file left behind")
    init = "init: config.json, O_DIRECT probe"

    with ctx.phase("store: exists? -> O_CREAT|O_EXCL|O_WRONLY|O_TRUNC|O_DIRECT temp -> replace (4 threads)", needs=(init,)) as run:
        if run:
            def st(i):
                return store_block(fm.get_file_name(hashes[i]), pview, i * BLOCK, use_direct[0])
            res = common.pmap(st, range(NBLOCKS), workers=4)
            ctx.check(all(res), "a block was skipped as already present on a fresh tree")
            live.update(range(NBLOCKS))
            res = common.pmap(st, range(8), workers=4)     # re-offload: exists -> skipped
            ctx.check(not any(res), "existing blocks were not skipped")
    store = "store: exists? -> O_CREAT|O_EXCL|O_WRONLY|O_TRUNC|O_DIRECT temp -> replace (4 threads)"

    with ctx.phase("lookup: stat and faccessat(F_OK), hits and misses", needs=(store,)) as run:
        if run:
            for i in range(NBLOCKS):
                p = fm.get_file_name(hashes[i])
                ctx.check(common.exists(p) and common.access_exists(p), f"lookup missed {p}")
            for i in range(200):
                p = fm.get_file_name(block_hash(i, "miss"))
                ctx.check(not common.exists(p), f"stat hit a missing block {p}")
                ctx.check(not common.access_exists(p), f"access(F_OK) hit a missing block {p}")

    with ctx.phase("load: O_RDONLY|O_DIRECT + readv into the KV buffer, byte-exact", needs=(store,)) as run:
        if run:
            dst = common.aligned_buffer(NBLOCKS * BLOCK)
            dview = memoryview(dst)
            order = list(range(NBLOCKS))
            random.Random(1).shuffle(order)
            common.pmap(lambda i: load_block(fm.get_file_name(hashes[i]), dview, i * BLOCK,
                                             use_direct[0]), order, workers=4)
            common.check_bytes("loaded KV buffer", dview, pview)
            dview.release()
            dst.close()

    with ctx.phase("stale temp file: O_EXCL gives EEXIST, cleanup removes it, retry succeeds", needs=(init,)) as run:
        if run:
            h = block_hash(999)
            dest = fm.get_file_name(h)
            common.sys_makedirs(os.path.dirname(dest))
            stale = dest + tmp_suffix()
            with open(stale, "wb") as f:
                f.write(b"left by a crashed worker")
            try:
                store_block(dest, pview, 0, use_direct[0])
                raise ReplayFailure(f"open({stale!r}, O_CREAT|O_EXCL|...) succeeded over an "
                                    f"existing file")
            except ReplayFailure as e:
                if "EEXIST" not in str(e):
                    raise
            ctx.check(not common.exists(stale), "store_block's cleanup did not remove the tmp")
            ctx.check(not common.exists(dest), "failed store published the block")
            ctx.check(store_block(dest, pview, 0, use_direct[0]), "retry did not store")
            common.sys_unlink(dest)

    with ctx.phase("bad block: short read -> os.remove(src) -> lookup misses", needs=(init,)) as run:
        if run:
            h = block_hash(777)
            dest = fm.get_file_name(h)
            common.sys_makedirs(os.path.dirname(dest))
            with open(dest, "wb") as f:          # truncated block (e.g. an interrupted copy)
                f.write(common.payload(h, BLOCK // 2))
            dst = common.aligned_buffer(BLOCK)
            try:
                load_block(dest, memoryview(dst), 0, use_direct[0])
                raise AssertionError("a half-size block loaded without a short-read error")
            except ReplayFailure as e:
                ctx.check("short read" in str(e), f"unexpected load error: {e}")
            finally:
                dst.close()
            ctx.check(not common.exists(dest), "the bad block was not removed")

    with ctx.phase("LRU evictor: os.remove oldest, reconcile with exists()", needs=(store,)) as run:
        if run:
            for i in range(12):                    # cap reached: evict the 12 oldest
                p = fm.get_file_name(hashes[i])
                sc(f"unlink({p!r})", os.remove, p)
                live.discard(i)
            for i in range(NBLOCKS):
                p = fm.get_file_name(hashes[i])
                ctx.check(common.exists(p) == (i in live),
                          f"after eviction stat({p}) says {'missing' if i in live else 'present'}")
            # evicted blocks are stored again later by the scheduler
            res = common.pmap(lambda i: store_block(fm.get_file_name(hashes[i]), pview,
                                                    i * BLOCK, use_direct[0]), range(4), 4)
            ctx.check(all(res), "re-store of evicted blocks was skipped")
            live.update(range(4))

    with ctx.phase("a load in flight while the evictor removes the block keeps reading it", needs=(store,)) as run:
        if run:
            i = max(live)
            p = fm.get_file_name(hashes[i])
            dst = common.aligned_buffer(BLOCK)
            dview = memoryview(dst)
            half = BLOCK // 2
            fd = sys_open(p, os.O_RDONLY | O_DIRECT)
            try:
                n1 = common.sys_pread_into(fd, dview[:half], 0, p, True)
                sc(f"unlink({p!r}) while open for reading", os.remove, p)   # LRUEvictor
                live.discard(i)
                n2 = common.sys_pread_into(fd, dview[half:], half, p + " (unlinked)", True)
                ctx.check(n1 + n2 == BLOCK, f"reads of the unlinked block returned {n1}+{n2}")
                common.check_bytes("block read across its unlink", dview,
                                   pview[i * BLOCK:(i + 1) * BLOCK])
            finally:
                os.close(fd)
                dview.release()
                dst.close()
            ctx.check(not common.exists(p), "the evicted block is still visible")

    with ctx.phase("restart keeps every offloaded block", needs=(store,), restart=True) as run:
        if run:
            ctx.remount()
            dst = common.aligned_buffer(NBLOCKS * BLOCK)
            dview = memoryview(dst)
            for i in range(NBLOCKS):
                p = fm.get_file_name(hashes[i])
                ctx.check(common.exists(p) == (i in live),
                          f"after restart stat({p}) says {'missing' if i in live else 'present'}"
                          f", want {'present' if i in live else 'missing'}")
                if i in live:
                    load_block(p, dview, i * BLOCK, use_direct[0])
                    common.check_bytes(f"block {i} after restart",
                                       dview[i * BLOCK:(i + 1) * BLOCK],
                                       pview[i * BLOCK:(i + 1) * BLOCK])
            dview.release()
            dst.close()

    with ctx.phase("kill -9 after the stores (vLLM never fsyncs) keeps every block", needs=(store,), restart=True) as run:
        if run:
            ctx.crash_restart()
            dst = common.aligned_buffer(BLOCK)
            lost = 0
            for i in range(NBLOCKS):
                p = fm.get_file_name(hashes[i])
                present = common.exists(p)
                if ctx.durability_async and i in live and not present:
                    lost += 1          # durability=async: a crash may lose recent blocks
                    continue
                ctx.check(present == (i in live),
                          f"after kill -9 stat({p}) says {'missing' if i in live else 'present'}")
                if i in live:
                    load_block(p, memoryview(dst), 0, use_direct[0])
                    common.check_bytes(f"block {i} after kill -9", memoryview(dst)[:BLOCK],
                                       pview[i * BLOCK:(i + 1) * BLOCK])
            dst.close()
            if lost:
                ctx.note(f"durability=async: {lost} blocks lost by the kill -9 (allowed)")
    pview.release()
    primary.close()


if __name__ == "__main__":
    sys.exit(common.main("vllm_fs_offload", scenario))
