"""Every connector replay (tests/connectors/, imported, not copied) run through one cluster
node's mount, and after each of its phases the tree it has built seen byte-exact through
another node's mount.

Each replay runs its whole scenario (writes, existence checks, byte-exact reads, its own
eviction or overwrite path) on node 1 in directory mode, so its kvfs-only phases (restart,
statvfs, xattrs) are left to the single-node runs in tests/connectors/. After every phase,
node 2 must list the same tree with the same bytes within a few seconds. Then the replay runs
again from node 2, checked on node 1. test_connectors_cluster.py interleaves the nodes inside
two of the scenarios; this module covers all eight."""

import contextlib
import hashlib
import importlib
import os
import unittest

import common  # tests/connectors (on PYTHONPATH via ctest)
from kvfs_cluster import start_cluster, WaitTimeout, wait_until

VISIBLE_S = 10.0


def tree_digest(root: str) -> dict[str, tuple[int, str]]:
    """relative path -> (size, sha256) of every regular file under root."""
    out = {}
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            p = os.path.join(dirpath, f)
            # O_NOATIME: the check must not change what a replay's atime-based cleaner sees
            fd = os.open(p, os.O_RDONLY | os.O_NOATIME)
            with os.fdopen(fd, "rb") as fh:
                data = fh.read()
            out[os.path.relpath(p, root)] = (len(data), hashlib.sha256(data).hexdigest())
    return out


class MirroredCtx(common.Ctx):
    """A replay context that, after each phase, waits until `reader_root` (the same directory
    seen through another node) holds exactly the tree under `root`, byte for byte."""

    def __init__(self, name, root, reader_root):
        super().__init__(name, root)
        self.reader_root = reader_root
        self.checked_files = 0  # the most files one check compared

    @contextlib.contextmanager
    def phase(self, name, needs=(), kvfs_only=False, restart=False):
        with super().phase(name, needs, kvfs_only, restart) as run:
            yield run
        if run and name not in self.failed:
            self.mirror_check(name)

    def mirror_check(self, phase):
        want = tree_digest(self.root) if os.path.exists(self.root) else {}
        got = {}

        def reader_matches():
            nonlocal got
            try:
                got = tree_digest(self.reader_root) if os.path.exists(self.reader_root) else {}
            except FileNotFoundError:  # a name listed a moment before it was replaced
                return False
            return got == want
        try:
            wait_until(reader_matches, VISIBLE_S, what="the other node sees the same tree")
        except WaitTimeout:
            missing = sorted(set(want) - set(got))[:5]
            extra = sorted(set(got) - set(want))[:5]
            differ = sorted(k for k in set(want) & set(got) if want[k] != got[k])[:5]
            detail = f"missing {missing}, extra {extra}, different {differ}"
            self.failed.add(phase)
            self.results.append((f"{phase}: seen from the other node", "FAIL", detail))
            print(f"FAIL {self.name}: {phase}: other node differs: {detail}", flush=True)
            return
        self.checked_files = max(self.checked_files, len(want))


class ConnectorReplaysAcrossNodes(unittest.TestCase):
    def setUp(self):
        self.c = start_cluster(self, n=2, replicas=1, request_timeout_ms=1000)

    def replay(self, module_name: str, writer: int, reader: int):
        mod = importlib.import_module(module_name)
        rel = f"{module_name}-from-node{writer}"
        ctx = MirroredCtx(module_name, self.c.path(writer, rel), self.c.path(reader, rel))
        mod.scenario(ctx)
        self.assertEqual(ctx.summary(), 0,
                         f"{module_name} written on node {writer}, checked on node {reader}")
        self.assertGreater(ctx.checked_files, 0,
                           f"{module_name}: no phase left a file to compare across nodes")

    def run_both_ways(self, module_name: str):
        self.replay(module_name, writer=1, reader=2)
        self.replay(module_name, writer=2, reader=1)

    def test_lmcache_local_disk(self):
        self.run_both_ways("lmcache_local_disk")

    def test_lmcache_fs_connector(self):
        self.run_both_ways("lmcache_fs_connector")

    def test_lmcache_gds(self):
        self.run_both_ways("lmcache_gds")

    def test_vllm_fs_offload(self):
        self.run_both_ways("vllm_fs_offload")

    def test_llmd_fs_backend(self):
        self.run_both_ways("llmd_fs_backend")

    def test_sglang_hicache_file(self):
        self.run_both_ways("sglang_hicache_file")

    def test_nixl_posix(self):
        self.run_both_ways("nixl_posix")

    def test_vua_core(self):
        self.run_both_ways("vua_core")


if __name__ == "__main__":
    unittest.main()
