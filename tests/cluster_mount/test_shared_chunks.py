"""Nodes that computed the same prefix publish the same chunk under the same name: five nodes,
writers on three of them publishing (temp file + rename) the same 24 names with the same bytes,
unlinking and reading them, while node 5 is killed and restarted and then node 4 is frozen past
its lease and resumed. A read never returns a torn or foreign version; once the writers stop,
every node lists the same names and reads each one whole. (Run by hand on 5-8 nodes before it
became a test: every run agreed; it guards group commit, resets and repair together.)"""

import errno
import functools
import os
import random
import signal
import threading
import time
import unittest

from kvfs_cluster import start_cluster, wait_until
from kvfs_testlib import write_file_atomic, freeze
from test_etcd_stalls import version

NAMES = 24
SETTLE_S = 30.0


@functools.lru_cache(maxsize=None)
def chunk(n: int) -> bytes:
    """The bytes every node publishes as chunk n (what one prefix's KV computes to)."""
    return version(f"chunk{n}", 4096 if n % 2 else 200_000)


class SharedChunks(unittest.TestCase):
    def test_nodes_publishing_the_same_chunks_through_a_kill_and_a_freeze_agree(self):
        c = start_cluster(self, n=5, replicas=2, capacity="512M")
        os.mkdir(c.path(1, "m"))
        for k in range(2, 6):
            c.wait_exists(k, "m")
        stop = threading.Event()
        lock = threading.Lock()
        outcomes: dict[str, int] = {}
        failures: list[str] = []

        def note(what: str) -> None:
            with lock:
                outcomes[what] = outcomes.get(what, 0) + 1

        def writer(k: int, t: int) -> None:
            rng = random.Random(k * 10 + t)
            while not stop.is_set():
                n = rng.randrange(NAMES)
                name = f"m/chunk{n:02d}"
                op = rng.random()
                try:
                    if op < 0.75:
                        write_file_atomic(c.path(k, name), chunk(n), tmp_suffix=f".tmp.{k}.{t}")
                        note("publish")
                    elif op < 0.85:
                        os.unlink(c.path(k, name))
                        note("unlink")
                    else:
                        with open(c.path(k, name), "rb") as f:
                            data = f.read()
                        if data != chunk(n):
                            with lock:
                                failures.append(f"node {k} read a torn or foreign {name}")
                        note("read")
                except OSError as e:
                    note(errno.errorcode.get(e.errno, str(e.errno)))
                    if e.errno != errno.ENOENT:
                        with lock:
                            failures.append(f"node {k} {name}: {e}")

        threads = [threading.Thread(target=writer, args=(k, t)) for k in (1, 2, 3)
                   for t in range(2)]
        for th in threads:
            th.start()
        try:
            time.sleep(2)
            c.kill9(5)
            time.sleep(2)
            c.restart(5)
            time.sleep(2)
            pid4 = c.node(4).pid
            freeze(pid4)
            try:
                time.sleep(4)  # past its 3 s lease: the others count it down
            finally:
                os.kill(pid4, signal.SIGCONT)
            time.sleep(2)
        finally:
            stop.set()
            for th in threads:
                th.join()
        self.assertEqual(failures, [], outcomes)
        self.assertGreater(outcomes.get("publish", 0), 50, outcomes)

        def listing(k: int) -> list[str]:
            return sorted(os.listdir(c.path(k, "m")))

        def agree() -> bool:
            first = listing(1)
            return all(listing(k) == first for k in range(2, 6))
        wait_until(agree, SETTLE_S, 0.5, what="every node lists the same names")
        names = listing(1)
        self.assertFalse([n for n in names if ".tmp." in n], names)
        for k in range(1, 6):
            for n in names:
                got = c.read_in_subprocess(k, f"m/{n}")
                self.assertTrue(got.get("ok"), (k, n, got))
                self.assertEqual(got["data"], chunk(int(n[len("chunk"):])), (k, n))


if __name__ == "__main__":
    unittest.main()
