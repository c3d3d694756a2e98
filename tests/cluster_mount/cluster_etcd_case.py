"""What the tests of the cluster's metadata on etcd share (test_cluster_etcd.py,
test_etcd_outages.py, test_cluster_catch_up.py)."""

import errno
import os
import threading
import unittest

from kvfs_cluster import start_cluster, wait_until
from kvfs_relay import TcpRelay
from kvfs_testlib import default_kvfs_bin

VISIBLE_S = 5.0
# A node whose lease expired (3 s TTL in the harness) plus margin.
DOWN_S = 20.0


def seed_bin() -> str:
    """kvfs-seed-names (bench/clusterbench): files committed straight into etcd."""
    return os.environ.get("KVFS_SEED_BIN") or os.path.join(
        os.path.dirname(default_kvfs_bin()), "kvfs-seed-names")


def count_names(path: str) -> int:
    with os.scandir(path) as it:
        return sum(1 for _ in it)


def errno_thread(fn, *args):
    """A thread, not started, that runs fn(*args), and the list that gets the errno it fails
    with."""
    errors = []

    def run():
        try:
            fn(*args)
        except OSError as e:
            errors.append(e.errno)
    return threading.Thread(target=run), errors


class ClusterEtcdCase(unittest.TestCase):
    """What the etcd cluster tests share: a cluster per test, a node behind a relay, etcd's
    view of names and modes, and a race of six writers."""

    def cluster(self, **kw):
        return start_cluster(self, **kw)

    def read(self, c, k, rel):
        with open(c.path(k, rel), "rb") as f:
            return f.read()

    def cluster_with_node_1_behind_a_relay(self, n):
        """A cluster of n nodes whose node 1 reaches etcd through a TcpRelay (started last)."""
        c = self.cluster(n=n, replicas=1, start_nodes=list(range(2, n + 1)))
        relay = TcpRelay((c.etcd.host, c.etcd.client_port))
        self.addCleanup(relay.close)
        c.etcd_endpoint_of[1] = relay.endpoint
        c.start_node(1)
        c.wait_joined(list(range(1, n + 1)))
        return c, relay

    def write(self, c, k, rel, data):
        with open(c.path(k, rel), "wb") as f:
            f.write(data)

    def etcd_names(self, c) -> set:
        """Every name key in etcd."""
        return {key for key, _ in c.etcd.range_prefix("/kvfs/d/")}

    def etcd_mode(self, c, ino: int) -> int:
        """The permission bits of object `ino`'s record in etcd (engine/cluster/record_value.cc:
        format, origin, id, type, then the mode)."""
        [(_, value)] = c.etcd.range_prefix(f"/kvfs/i/{ino:016x}")
        return int.from_bytes(value[12:16], "little") & 0o7777

    def write_when_accepted(self, c, k, rel, data, what):
        """Writes rel on node k once it accepts changes again (etcd back), within 30 s."""
        def writable():
            try:
                self.write(c, k, rel, data)
                return True
            except OSError:
                return False
        wait_until(writable, 30.0, 0.5, what=what)

    def one_winner(self, name, attempt) -> tuple:
        """Runs attempt(k, i) for 2 writers on each of nodes 1-3 at once: exactly one must
        succeed, the others fail EEXIST. Returns the winner (k, i)."""
        writers = [(k, i) for k in (1, 2, 3) for i in range(2)]
        barrier = threading.Barrier(len(writers))
        results = []

        def run(k, i):
            barrier.wait()
            try:
                attempt(k, i)
                results.append((k, i, 0))
            except OSError as e:
                results.append((k, i, e.errno))
        threads = [threading.Thread(target=run, args=w) for w in writers]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners = [(k, i) for k, i, err in results if err == 0]
        self.assertEqual(len(winners), 1, f"{name}: {results}")
        for k, i, err in results:
            self.assertIn(err, (0, errno.EEXIST), f"{name}: {results}")
        return winners[0]
