"""A node cut off from its peers but not from etcd, through real mounts: node 2 runs in a network
namespace of its own (tests/pylib/kvfs_netns.py) whose peer link goes dark while its etcd link
stays up, so its lease lives and every node still lists it "up" (unlike a frozen or killed node,
whose lease runs out). Packets to it are dropped without an error, as with a cable cut between.

Every test makes its own namespace and links and removes them, and stops its daemons by PID."""

import errno
import os
import time
import unittest

from kvfs_cluster import start_cluster, wait_until
from kvfs_netns import NetnsHost, netns_available
from kvfs_testlib import chunk_bytes, write_file_atomic

TIMEOUT_S = 1.0  # the harness's --request-timeout
SIZE = 3 << 20


class Partition(unittest.TestCase):
    def setUp(self):
        why = netns_available()
        if why:
            self.skipTest(why)
        try:
            self.ns = NetnsHost(os.environ.get("KVFS_TEST_TMPDIR") or "/tmp")
        except RuntimeError as e:
            self.skipTest(f"cannot make a network namespace here: {e}")
        self.addCleanup(self.ns.cleanup)
        self.addCleanup(self.ns.heal)  # before the daemons stop: they leave through the link

    def cluster(self, replicas=2):
        ns = self.ns
        return start_cluster(self, n=3, replicas=replicas, etcd_host=ns.etcd_root,
                             hosts={1: ns.peer_root, 2: ns.peer_ns, 3: ns.peer_root},
                             node_kvfs_bin={2: ns.wrapper()})

    def timed(self, fn):
        start = time.monotonic()
        try:
            result = fn()
        except OSError as e:
            result = e
        return result, time.monotonic() - start

    def read(self, c, k, rel):
        with open(c.path(k, rel), "rb") as f:
            return f.read()

    def publish_on_1(self, c, count):
        """count files of SIZE published on node 1 and seen by every node: name -> holders."""
        names = [f"f{i}" for i in range(count)]
        for n in names:
            write_file_atomic(c.path(1, n), chunk_bytes(n, SIZE))
        for n in names:
            for k in (2, 3):
                c.wait_exists(k, n, 5.0)
        return {n: sorted(h["id"] for h in c.location(1, n)["holders"]) for n in names}

    def publish_around_2(self, c, count):
        """Publishes g0.. on node 1 while node 2 is cut off: each lands on nodes 1 and 3, and
        all of them together pay one timeout (the first placement on node 2)."""
        spent = 0.0
        for i in range(count):
            _, took = self.timed(lambda: write_file_atomic(c.path(1, f"g{i}"),
                                                           chunk_bytes(f"g{i}", 1 << 20)))
            spent += took
            self.assertEqual(sorted(h["id"] for h in c.location(1, f"g{i}")["holders"]), [1, 3])
        self.assertLess(spent, TIMEOUT_S + 2.0)

    def test_a_cut_off_peer_costs_one_timeout_and_is_used_again_once_back(self):
        c = self.cluster()
        holders = self.publish_on_1(c, 12)
        names = list(holders)
        elsewhere = [n for n in names if 2 not in holders[n]]  # node 2 reads these remotely
        self.assertTrue(elsewhere and len(elsewhere) < len(names), holders)
        self.assertEqual(self.read(c, 2, elsewhere[0]), chunk_bytes(elsewhere[0], SIZE))

        self.ns.partition()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        # Node 3 reads every file (another holder each); node 1 publishes on: the first
        # placement on node 2 pays one timeout, the others go to node 3 at once.
        for n in names:
            got, took = self.timed(lambda: self.read(c, 3, n))
            self.assertEqual(got, chunk_bytes(n, SIZE), n)
        self.publish_around_2(c, 5)
        # A partition, not a death: etcd still has node 2's lease.
        self.assertEqual(c.node_states(1).get(2), "up")

        # Node 2 cannot reach any holder of `elsewhere`: EIO after one timeout, then at once.
        err, took = self.timed(lambda: self.read(c, 2, elsewhere[0]))
        self.assertIsInstance(err, OSError)
        self.assertLess(took, TIMEOUT_S + 1.0)
        for n in elsewhere[1:3]:
            err, took = self.timed(lambda: self.read(c, 2, n))
            self.assertIsInstance(err, OSError)
            self.assertLess(took, 0.5)
        # What node 2 holds it reads, and it still publishes (etcd is there): its only copy is
        # its own until the link is back.
        mine = [n for n in names if 2 in holders[n]][0]
        self.assertEqual(self.read(c, 2, mine), chunk_bytes(mine, SIZE))
        write_file_atomic(c.path(2, "cut"), chunk_bytes("cut", 1 << 20))
        self.assertEqual([h["id"] for h in c.location(2, "cut")["holders"]], [2])
        c.wait_exists(1, "cut", 5.0)

        # Back: a ping finds node 2 again within a second or two, not after the 10 s a node
        # that timed out is skipped for (before, node 2's reads failed at once until then).
        self.ns.heal()
        healed = time.monotonic()
        wait_until(lambda: self.timed(lambda: self.read(c, 2, elsewhere[0]))[0]
                   == chunk_bytes(elsewhere[0], SIZE), 4.0, 0.1,
                   what="node 2 reads from its peers again")
        self.assertLess(time.monotonic() - healed, 4.0)
        # Node 1 pings node 2 again too, and reads what only node 2 holds.
        wait_until(lambda: "node 2 answers again" in c.log(1), 5.0, 0.1,
                   what="node 1 finds node 2 again")
        self.assertEqual(self.read(c, 1, "cut"), chunk_bytes("cut", 1 << 20))
        # The chunk published while cut off gets its second copy (repair).
        wait_until(lambda: len(c.location(1, "cut")["holders"]) == 2, 15.0, 0.2,
                   what="the chunk node 2 published alone has two holders")

    def test_publishes_that_want_a_cut_off_peer_pay_one_timeout_not_one_each(self):
        # R=3 on 3 nodes: every publish of node 1 wants a copy on node 2, whose lease lives
        # while its link to its peers is dark. The first publish pays one timeout; the next ones
        # skip node 2 (they had each waited a timeout for it: one publish a second per
        # writer for as long as the cut lasted) and keep 2 copies, and repair adds the third
        # once node 2 answers again.
        c = self.cluster(replicas=3)
        self.publish_on_1(c, 1)
        self.ns.partition()
        self.publish_around_2(c, 5)
        self.assertEqual(c.node_states(1).get(2), "up")
        self.ns.heal()
        for i in range(5):
            wait_until(lambda: len(c.location(1, f"g{i}")["holders"]) == 3, 20.0, 0.2,
                       what=f"g{i} gets its third copy once node 2 answers")
        self.assertEqual(self.read(c, 2, "g4"), chunk_bytes("g4", 1 << 20))

    def test_a_node_cut_off_from_etcd_refuses_changes_serves_reads_and_comes_back(self):
        # The other link: node 2 reaches its peers but not etcd. Its first change waits for
        # etcd and fails with EROFS (and the node goes on: this once deadlocked it); its reads
        # go on; the others see it down once its lease runs out and place elsewhere, yet still
        # read its copies. With etcd back it accepts changes and catches up at once.
        c = self.cluster()
        holders = self.publish_on_1(c, 8)
        names = list(holders)

        self.ns.cut_etcd()
        err, took = self.timed(lambda: write_file_atomic(c.path(2, "w"), b"x" * 1000))
        self.assertIsInstance(err, OSError)
        self.assertEqual(err.errno, errno.EROFS)
        self.assertLess(took, 10.0)
        for n in names:
            self.assertEqual(self.read(c, 2, n), chunk_bytes(n, SIZE), n)
        c.wait_state(1, 2, "down", 15.0)
        write_file_atomic(c.path(1, "during"), chunk_bytes("during", 1 << 20))
        self.assertEqual(sorted(h["id"] for h in c.location(1, "during")["holders"]), [1, 3])
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        mine = [n for n in names if 2 in holders[n]][0]  # node 1 or 3 may read it from node 2
        self.assertEqual(self.read(c, 3, mine), chunk_bytes(mine, SIZE))

        self.ns.mend_etcd()
        mended = time.monotonic()
        wait_until(lambda: self.timed(lambda: write_file_atomic(c.path(2, "back"), b"b"))[0]
                   is None, 10.0, 0.2, what="node 2 accepts changes again")
        c.wait_exists(2, "during", 5.0)
        self.assertEqual(self.read(c, 2, "during"), chunk_bytes("during", 1 << 20))
        c.wait_exists(1, "back", 5.0)
        c.wait_state(1, 2, "up", 5.0)
        self.assertLess(time.monotonic() - mended, 10.0)


if __name__ == "__main__":
    unittest.main()
