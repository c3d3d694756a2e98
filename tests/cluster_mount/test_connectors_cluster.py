"""Connector replays across cluster nodes: the file I/O of LMCache's local disk backend and of
vLLM's fs offloading tier (tests/connectors/, imported, not copied) written through node 1's
mount and looked up / read through node 2's, then the connector's eviction and overwrite paths
run from node 2 and node 1 sees their results. Two workers on two nodes sharing one kvfs
directory is how a cluster is meant to be used (docs/cluster.md: names are global)."""

import collections
import os
import unittest

import common  # tests/connectors (on PYTHONPATH via ctest)
import lmcache_local_disk as lmc
import vllm_fs_offload as vfs
from common import check_bytes, payload
from kvfs_cluster import start_cluster, wait_until

VISIBLE_S = 5.0


class ConnectorsAcrossNodes(unittest.TestCase):
    def setUp(self):
        self.c = start_cluster(self, n=3, replicas=2, request_timeout_ms=1000)

    def ctx(self, k, name):
        return common.Ctx(name, self.c.path(k, name), mount=self.c.node(k).mount)

    def wait_visible(self, path, present=True):
        wait_until(lambda: common.exists(path) == present, VISIBLE_S,
                   what=f"{path} {'appears' if present else 'disappears'}")

    def test_lmcache_local_disk_node1_writes_node2_reads_evicts_overwrites(self):
        ctx1, ctx2 = self.ctx(1, "lmcache"), self.ctx(2, "lmcache")
        # Worker 0 buffered, worker 1 O_DIRECT, as in the single-mount replay.
        be1 = {w: lmc.Backend(ctx1, w, odirect, max_size=64 << 20)
               for w, odirect in ((0, False), (1, True))}
        self.wait_visible(ctx2.root)
        be2 = {w: lmc.Backend(ctx2, w, odirect, max_size=64 << 20)
               for w, odirect in ((0, False), (1, True))}
        prompt = list(range(1000, 1000 + 6 * lmc.CHUNK_TOKENS + 37))
        stored = {}
        for w, be in be1.items():
            for h, size in lmc.chunk_hashes(prompt):
                ks = lmc.key_string(w, h)
                be.put(ks, payload(ks, size))
                stored[(w, ks)] = size

        # node 2: existence checks (hits and misses), then retrieve byte-exact
        for (w, ks), size in stored.items():
            path = be2[w].key_to_path(ks)
            self.wait_visible(path)
            self.assertEqual(common.sys_stat(path).st_size, size, path)
            got = be2[w].read_file(ks, size)
            self.assertIsNotNone(got, f"node 2 read of {ks} gave ENOENT")
            check_bytes(f"node 2 read of {ks} (worker {w})", got, payload(ks, size))
        for i in range(16):
            ks = lmc.key_string(i % 2, 0xdead0000 + i)
            self.assertFalse(common.exists(be2[i % 2].key_to_path(ks)))
            self.assertIsNone(be2[i % 2].read_file(ks, 4096))

        # overwrite in place from node 2 (no O_TRUNC; O_DIRECT for worker 1): node 1 read the
        # old version first (page cache warm), then sees only whole versions, the new one soon
        for w in (0, 1):
            h, size = lmc.chunk_hashes(prompt)[2]
            ks = lmc.key_string(w, h)
            old, new = payload(ks, size, 0), payload(ks, size, 1)
            check_bytes(f"node 1 read of {ks} before the overwrite", be1[w].read_file(ks, size),
                        old)
            be2[w].write_file(ks, new)
            be1[w].version[ks] = be2[w].version[ks] = 1

            def node1_sees_new():
                got = be1[w].read_file(ks, size)
                if got != old and got != new:
                    self.fail(f"node 1 read a torn or wrong {ks} ({common.first_diff(got, new)})")
                return got == new
            wait_until(node1_sees_new, VISIBLE_S, what=f"node 1 sees the overwrite of {ks}")

        # eviction from node 2: its backend's LRU index holds what node 1 stored (as if the
        # worker had moved), room for two more chunks, then a new prompt is stored there
        prompt_c = list(range(90000, 90000 + 4 * lmc.CHUNK_TOKENS))
        for w in (0, 1):
            be2[w].dict = collections.OrderedDict(be1[w].dict)
            be2[w].current = be1[w].current
            be2[w].version = dict(be1[w].version)
            be2[w].max_size = be2[w].current + 2 * lmc.CHUNK_TOKENS * lmc.TOKEN_BYTES
            for h, size in lmc.chunk_hashes(prompt_c):
                ks = lmc.key_string(w, h)
                be2[w].put(ks, payload(ks, size))
                stored[(w, ks)] = size
            self.assertGreaterEqual(len(be2[w].evicted), 2, f"worker {w}: no evictions")
            for ks in be2[w].evicted:
                stored.pop((w, ks))
                self.wait_visible(be1[w].key_to_path(ks), present=False)
                self.assertIsNone(be1[w].read_file(ks, 4096), f"node 1 still reads evicted {ks}")
        want = {os.path.basename(be1[w].key_to_path(ks)) for (w, ks) in stored}
        wait_until(lambda: set(common.sys_listdir(ctx1.root)) == want, VISIBLE_S,
                   what="node 1's readdir matches the chunks left after node 2's evictions")
        for (w, ks), size in stored.items():
            got = be1[w].read_file(ks, size)
            self.assertIsNotNone(got, f"node 1 lost {ks}")
            check_bytes(f"node 1 read of {ks} after node 2's evictions", got,
                        payload(ks, size, be2[w].version.get(ks, 0)))

    def test_vllm_fs_offload_node1_stores_node2_loads_evicts_restores(self):
        nblocks, block = 24, vfs.BLOCK
        fm1 = vfs.FileMapper(self.c.path(1, "vllm"))
        fm2 = vfs.FileMapper(self.c.path(2, "vllm"))
        fm1.write_run_config()
        self.wait_visible(os.path.join(fm2.base_path, "config.json"))
        fm2.write_run_config()  # the second worker finds the config: a no-op
        ok, err = vfs.probe_o_direct(fm2.base_path)
        self.assertTrue(ok, f"O_DIRECT probe on node 2 failed: {err}")
        direct = True

        primary = common.aligned_buffer(nblocks * block)
        self.addCleanup(primary.close)
        pview = memoryview(primary)
        self.addCleanup(pview.release)
        hashes = [vfs.block_hash(i, "cluster") for i in range(nblocks)]
        for i, h in enumerate(hashes):
            pview[i * block:(i + 1) * block] = payload(h, block)

        # store on node 1 (exists? -> O_EXCL|O_DIRECT temp -> replace), 4 threads
        res = common.pmap(lambda i: vfs.store_block(fm1.get_file_name(hashes[i]), pview,
                                                    i * block, direct), range(nblocks), 4)
        self.assertTrue(all(res))

        # lookups on node 2: stat and faccessat hit, misses miss; re-offload is skipped
        for h in hashes:
            self.wait_visible(fm2.get_file_name(h))
            self.assertTrue(common.access_exists(fm2.get_file_name(h)))
        for i in range(50):
            p = fm2.get_file_name(vfs.block_hash(i, "miss"))
            self.assertFalse(common.exists(p) or common.access_exists(p), p)
        res = common.pmap(lambda i: vfs.store_block(fm2.get_file_name(hashes[i]), pview,
                                                    i * block, direct), range(8), 4)
        self.assertFalse(any(res), "node 2 re-stored blocks that node 1 had stored")

        # load on node 2: O_RDONLY|O_DIRECT + readv into the KV buffer, byte-exact
        dst = common.aligned_buffer(nblocks * block)
        self.addCleanup(dst.close)
        dview = memoryview(dst)
        self.addCleanup(dview.release)
        common.pmap(lambda i: vfs.load_block(fm2.get_file_name(hashes[i]), dview, i * block,
                                             direct), range(nblocks), 4)
        check_bytes("KV buffer loaded on node 2", dview, pview)

        # LRU evictor on node 2 removes the 8 oldest; node 1 reconciles with exists()
        for i in range(8):
            common.sys_unlink(fm2.get_file_name(hashes[i]))
        for i in range(nblocks):
            self.wait_visible(fm1.get_file_name(hashes[i]), present=i >= 8)
        # the scheduler stores 4 of them again, from node 2; node 1 loads them byte-exact
        res = common.pmap(lambda i: vfs.store_block(fm2.get_file_name(hashes[i]), pview,
                                                    i * block, direct), range(4), 4)
        self.assertTrue(all(res), "node 2 skipped the re-store of evicted blocks")
        dview[:] = b"\0" * len(dview)
        for i in range(4):
            self.wait_visible(fm1.get_file_name(hashes[i]))
            vfs.load_block(fm1.get_file_name(hashes[i]), dview, i * block, direct)
            check_bytes(f"block {i} re-stored on node 2, loaded on node 1",
                        dview[i * block:(i + 1) * block], pview[i * block:(i + 1) * block])
        for i in range(4, 8):
            self.assertFalse(common.exists(fm1.get_file_name(hashes[i])))


if __name__ == "__main__":
    unittest.main()
