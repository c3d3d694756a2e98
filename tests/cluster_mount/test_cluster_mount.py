"""A 3-node kvfs cluster through real mounts (tests/pylib/kvfs_cluster.py): names are global,
rename and unlink move no chunk data, a killed node costs a timeout and never a hang, a
restarted node rejoins, a wrong secret is refused; kvfsctl nodes and where show all of it.

Every test starts its own cluster on loopback (127.0.0.2..4, free ports) with a 1 s request
timeout, and stops it by PID at the end. Reads that may meet a dead or frozen node run in a
child process with a hard timeout, so a hang fails the test instead of hanging it."""

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest
import unittest.mock

from kvfs_cluster import KvfsCluster, start_cluster, wait_until
from kvfs_testlib import chunk_bytes, freeze

REQUEST_TIMEOUT_MS = 1000
# A read that meets dead or frozen replicas costs at most one request timeout per replica
# (R <= 2 here, plus the writer's copy); the rest is a generous margin for a loaded machine.
READ_BOUND_S = 3 * REQUEST_TIMEOUT_MS / 1000 + 9
# Visibility of a change made on another node: the design asks for about a second.
VISIBLE_S = 5.0
# Ping misses until a node is down (three by default) plus margin.
DOWN_S = 20.0
# Lease expiry (3 s in the harness) plus copying a few small chunks, with margin.
REPAIR_S = 30.0

SIZES = [1, 4096, 70_000, 1 << 20, 3 * (1 << 20) + 17]


def traffic(c, k):
    """Sum of the chunk-data counters (GETs and PUTs, both directions) in node k's view."""
    total = 0
    for n in c.nodes_json(k)["nodes"]:
        for key in ("gets_sent", "gets_served", "puts_sent", "puts_received"):
            total += int(n.get(key, 0))
    return total


def holder_ids(loc):
    """The node ids user.kvfs.location lists as holding a copy."""
    return [h["id"] for h in loc["holders"]]


def self_entry(c, k):
    """Node k's own row in its .kvfs/nodes (its totals over all peers)."""
    (entry,) = [n for n in c.nodes_json(k)["nodes"] if n["state"] == "self"]
    return entry


class ClusterMount(unittest.TestCase):
    def cluster(self, **kw):
        kw.setdefault("request_timeout_ms", REQUEST_TIMEOUT_MS)
        return start_cluster(self, **kw)

    def read(self, c, k, rel):
        with open(c.path(k, rel), "rb") as f:
            return f.read()

    def assert_content(self, c, k, rel, name, size):
        data = self.read(c, k, rel)
        self.assertEqual(len(data), size, f"{rel} on node {k}: size")
        self.assertTrue(data == chunk_bytes(name, size), f"{rel} on node {k}: content differs")

    def assert_read_ok_bounded(self, c, k, rel, name, size):
        r = c.read_in_subprocess(k, rel, timeout=READ_BOUND_S + 20)
        self.assertFalse(r["timed_out"], f"read of {rel} on node {k} hung")
        self.assertTrue(r["ok"], f"read of {rel} on node {k} failed: errno {r['errno']}")
        self.assertEqual(len(r["data"]), size, f"{rel} on node {k}")
        self.assertTrue(r["data"] == chunk_bytes(name, size), f"{rel} on node {k}: content")

    # -- names are global ---------------------------------------------------------------------
    def test_publish_on_node1_read_on_node3_byte_exact(self):
        c = self.cluster(n=3, replicas=2)
        os.mkdir(c.path(1, "m"))
        for i, size in enumerate(SIZES):
            c.publish(1, f"m/chunk{i}", chunk_bytes(f"p{i}", size))
        for i, size in enumerate(SIZES):
            c.wait_exists(3, f"m/chunk{i}", VISIBLE_S)
            self.assertEqual(os.stat(c.path(3, f"m/chunk{i}")).st_size, size)
            self.assert_content(c, 3, f"m/chunk{i}", f"p{i}", size)
            self.assert_content(c, 2, f"m/chunk{i}", f"p{i}", size)
        # The temp names of the publishes never show up anywhere.
        for k in (1, 2, 3):
            self.assertEqual(sorted(os.listdir(c.path(k, "m"))),
                             sorted(f"chunk{i}" for i in range(len(SIZES))), f"node {k}")
        # A new version published on node 2 replaces the old one on every node.
        c.publish(2, "m/chunk2", chunk_bytes("p2-v2", 50_000))
        for k in (1, 3):
            wait_until(lambda: os.stat(c.path(k, "m/chunk2")).st_size == 50_000, VISIBLE_S,
                       what=f"new version of m/chunk2 on node {k}")
            self.assert_content(c, k, "m/chunk2", "p2-v2", 50_000)

    def test_readdir_on_every_node_lists_every_chunk(self):
        c = self.cluster(n=3, replicas=2)
        os.makedirs(c.path(1, "model/layer"))
        for k in (2, 3):
            c.wait_exists(k, "model/layer", VISIBLE_S)
        want = set()
        for k in (1, 2, 3):
            for i in range(8):
                name = f"n{k}-{i:02d}"
                c.publish(k, f"model/layer/{name}", chunk_bytes(name, 4096 * (i + 1)))
                want.add(name)
        for k in (1, 2, 3):
            wait_until(lambda: set(os.listdir(c.path(k, "model/layer"))) == want, VISIBLE_S,
                       what=f"readdir on node {k} lists all 24 chunks")
            self.assertEqual(os.listdir(c.path(k, "model")), ["layer"])
            for name in sorted(want)[::5]:
                i = int(name[-2:])
                self.assert_content(c, k, f"model/layer/{name}", name, 4096 * (i + 1))

    def test_rename_and_unlink_seen_everywhere_and_move_no_data(self):
        c = self.cluster(n=3, replicas=2)
        os.makedirs(c.path(1, "r/sub"))
        os.makedirs(c.path(1, "other"))
        files = {"r/f0": 100_000, "r/f1": 5000, "r/sub/f2": 1 << 20, "r/sub/f3": 7}
        for rel, size in files.items():
            c.publish(1, rel, chunk_bytes(rel, size))
        for k in (2, 3):
            for rel in files:
                c.wait_exists(k, rel, VISIBLE_S)
        keys = {rel: c.location(2, rel)["chunk_key"] for rel in files}
        before = {k: traffic(c, k) for k in (1, 2, 3)}

        os.rename(c.path(2, "r/f0"), c.path(2, "r/g0"))            # same directory
        os.rename(c.path(2, "r/f1"), c.path(2, "other/f1"))        # across directories
        os.rename(c.path(2, "r/sub"), c.path(2, "r/sub2"))         # a whole directory
        moved = {"r/f0": "r/g0", "r/f1": "other/f1", "r/sub/f2": "r/sub2/f2",
                 "r/sub/f3": "r/sub2/f3"}
        for k in (1, 3):
            for old, new in moved.items():
                c.wait_exists(k, new, VISIBLE_S)
                c.wait_gone(k, old, VISIBLE_S)
            self.assertFalse(os.path.exists(c.path(k, "r/sub")))
        after = {k: traffic(c, k) for k in (1, 2, 3)}
        self.assertEqual(after, before, "GET/PUT counters moved during the renames")
        for old, new in moved.items():
            self.assertEqual(c.location(3, new)["chunk_key"], keys[old],
                             f"rename {old} -> {new} changed the chunk")
        for old, new in moved.items():
            for k in (1, 2, 3):
                self.assert_content(c, k, new, old, files[old])

        # unlink on node 3 is seen on nodes 1 and 2 (positive dentries invalidated too)
        os.unlink(c.path(3, "r/g0"))
        os.unlink(c.path(3, "r/sub2/f3"))
        for k in (1, 2):
            c.wait_gone(k, "r/g0", VISIBLE_S)
            c.wait_gone(k, "r/sub2/f3", VISIBLE_S)
            self.assertEqual(sorted(os.listdir(c.path(k, "r/sub2"))), ["f2"])
            with self.assertRaises(FileNotFoundError):
                open(c.path(k, "r/g0"), "rb")

    def test_negative_lookup_then_remote_publish_found_within_seconds(self):
        c = self.cluster(n=3, replicas=2)
        os.mkdir(c.path(1, "neg"))
        c.wait_exists(2, "neg", VISIBLE_S)
        target = c.path(2, "neg/late")
        for _ in range(3):  # a cached negative dentry on node 2
            self.assertFalse(os.path.exists(target))
        with self.assertRaises(FileNotFoundError):
            open(target, "rb")
        c.publish(1, "neg/late", chunk_bytes("late", 200_000))
        c.wait_exists(2, "neg/late", VISIBLE_S)
        self.assert_content(c, 2, "neg/late", "late", 200_000)

    def test_a_write_by_another_uid_drops_set_id_bits_on_every_node(self):
        """An O_APPEND write by another uid drops the set-user-ID bit (kvfs's job: the kernel
        leaves direct_io writes to it). The drop goes out with the writer's publish; before
        that, the same user sets an xattr on the file through another node, whose record brings
        the old mode back to the writer's node: the publish must drop the bits again, or the
        new bytes went out set-user-ID on every node."""
        if os.geteuid() != 0 or not shutil.which("setpriv"):
            self.skipTest("needs root and setpriv: switches to uid 65534")
        c = self.cluster(n=2, replicas=2, extra_args=["-o", "allow_other"])
        os.chmod(c.root, 0o755)  # the mounts' parents, for uid 65534
        for k in (1, 2):
            d = c.path(k)
            while d != c.root:
                d = os.path.dirname(d)
                os.chmod(d, 0o755)
        c.publish(1, "tool", b"#!/bin/sh\necho hi\n")
        os.chown(c.path(1, "tool"), 1000, 1000)
        os.chmod(c.path(1, "tool"), 0o6777)
        mode = lambda k: os.stat(c.path(k, "tool")).st_mode & 0o7777  # noqa: E731
        c.wait_exists(2, "tool", VISIBLE_S)  # the publish may not be there yet (mode() raises)
        wait_until(lambda: mode(2) == 0o6777, VISIBLE_S, what="the 6777 mode on node 2")
        nobody = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups",
                  sys.executable, "-c"]
        writer = subprocess.Popen(
            nobody + ["import os, sys\n"
                      "fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)\n"
                      "os.write(fd, b'payload\\n')\n"
                      "print('written', flush=True)\n"
                      "sys.stdin.readline()\n"
                      "os.close(fd)\n", c.path(1, "tool")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.addCleanup(writer.kill)
        self.assertEqual(writer.stdout.readline().strip(), "written")
        self.assertEqual(mode(1), 0o777, "the write dropped both bits on its node")
        subprocess.run(nobody + ["import os, sys; os.setxattr(sys.argv[1], 'user.x', b'1')",
                                 c.path(2, "tool")], check=True, timeout=30)
        wait_until(lambda: mode(1) == 0o6777, VISIBLE_S,
                   what="node 2's record (with the old mode) on node 1")
        writer.communicate("\n", timeout=30)
        self.assertEqual(writer.returncode, 0)
        for k in (1, 2):
            wait_until(lambda: open(c.path(k, "tool"), "rb").read().endswith(b"payload\n"),
                       VISIBLE_S, what=f"the new bytes on node {k}")
            self.assertEqual(oct(mode(k)), oct(0o777), f"node {k}")
            self.assertEqual(os.getxattr(c.path(k, "tool"), "user.x"), b"1", f"node {k}")

    def test_user_xattrs_reach_every_node_and_xattr_create_holds_across_nodes(self):
        c = self.cluster(n=3, replicas=1)
        c.publish(1, "xa", chunk_bytes("xa", 70_000))
        os.mkdir(c.path(1, "xd"))
        os.setxattr(c.path(1, "xa"), "user.model", b"llama-70b")
        os.setxattr(c.path(1, "xd"), "user.layer", b"\x00\x01")

        def xattrs(k, rel):
            try:
                return {n: os.getxattr(c.path(k, rel), n) for n in os.listxattr(c.path(k, rel))}
            except FileNotFoundError:
                return None
            except OSError as e:
                # Listed, then removed by another node's change before its getxattr: this
                # look saw the change half applied; the next one sees it whole.
                if e.errno == errno.ENODATA:
                    return None
                raise

        for k in (2, 3):
            wait_until(lambda: xattrs(k, "xa") == {"user.model": b"llama-70b"}, VISIBLE_S,
                       what=f"xattr of xa on node {k}")
            wait_until(lambda: xattrs(k, "xd") == {"user.layer": b"\x00\x01"}, VISIBLE_S,
                       what=f"xattr of xd on node {k}")
        # Changed on node 2, removed on node 3: node 1 sees both.
        os.setxattr(c.path(2, "xa"), "user.model", b"llama-8b", os.XATTR_REPLACE)
        wait_until(lambda: xattrs(3, "xa") == {"user.model": b"llama-8b"}, VISIBLE_S,
                   what="node 2's change on node 3")
        os.removexattr(c.path(3, "xa"), "user.model")
        wait_until(lambda: xattrs(1, "xa") == {}, VISIBLE_S, what="node 3's removal on node 1")
        # XATTR_CREATE from two nodes at once: one wins, the other gets EEXIST, all agree.
        for round_ in range(3):
            name = f"user.race{round_}"
            barrier = threading.Barrier(2)
            outcome = {}

            def create(k):
                barrier.wait()
                try:
                    os.setxattr(c.path(k, "xa"), name, str(k).encode(), os.XATTR_CREATE)
                    outcome[k] = "ok"
                except OSError as e:
                    outcome[k] = errno.errorcode.get(e.errno, str(e.errno))

            threads = [threading.Thread(target=create, args=(k,)) for k in (1, 2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(30)
            self.assertEqual(sorted(outcome.values()), ["EEXIST", "ok"], outcome)
            (winner,) = [k for k, v in outcome.items() if v == "ok"]
            for k in (1, 2, 3):
                wait_until(lambda: xattrs(k, "xa").get(name) == str(winner).encode(), VISIBLE_S,
                           what=f"{name} = {winner} on node {k}")
        # A restarted node reads them back from etcd.
        c.stop(3)
        c.restart(3)
        wait_until(lambda: xattrs(3, "xd") == {"user.layer": b"\x00\x01"}, VISIBLE_S,
                   what="xd's xattr on the restarted node 3")
        self.assertEqual(set(xattrs(3, "xa")), {"user.race0", "user.race1", "user.race2"})

    # -- failures -----------------------------------------------------------------------------
    def test_checksum_xattr_is_the_same_on_every_node(self):
        # R=2 of 3: every file has a node without a copy, which answers from the record.
        c = self.cluster(n=3, replicas=2)
        size = 3 * (1 << 20) + 1
        c.publish(1, "ca", chunk_bytes("ca", size))
        c.publish(1, "cb", chunk_bytes("cb", size))
        c.publish(2, "cc", chunk_bytes("ca", size))  # ca's bytes, published by another node
        names = ("ca", "cb", "cc")
        sums = {}
        for k in (1, 2, 3):
            for n in names:
                c.wait_exists(k, n, VISIBLE_S)
            sums[k] = {n: os.getxattr(c.path(k, n), "user.kvfs.checksum").decode()
                       for n in names}
        self.assertTrue(all(v.startswith("xxh3:") for v in sums[1].values()), sums)
        self.assertEqual(sums[1], sums[2])
        self.assertEqual(sums[1], sums[3])
        self.assertNotEqual(sums[1]["ca"], sums[1]["cb"])
        self.assertEqual(sums[1]["ca"], sums[1]["cc"])
        self.assertTrue(any(not c.location(k, "ca")["local"] for k in (1, 2, 3)))
        # A new version has a new digest everywhere.
        c.publish(3, "cb", chunk_bytes("cb2", size))
        for k in (1, 2):
            wait_until(lambda: os.getxattr(c.path(k, "cb"), "user.kvfs.checksum").decode()
                       not in (sums[1]["cb"],), VISIBLE_S, what=f"new digest of cb on node {k}")
        got = {k: os.getxattr(c.path(k, "cb"), "user.kvfs.checksum") for k in (1, 2, 3)}
        # (Failed 1 run in about 160 without a cause found: the message has what to look at.)
        self.assertEqual(got[1], got[3], {"now": got, "before": sums[1]["cb"], "stat": {
            k: os.getxattr(c.path(k, "cb"), "user.kvfs.stat").decode() for k in (1, 2, 3)}})

    def test_kill9_with_r2_every_chunk_readable_on_survivors(self):
        c = self.cluster(n=3, replicas=2)
        os.mkdir(c.path(1, "k"))
        files = {}
        for k in (1, 2, 3):
            c.wait_exists(k, "k", VISIBLE_S)
            for i in range(4):
                rel = f"k/w{k}-{i}"
                files[rel] = 30_000 * (i + 1) + k
                c.publish(k, rel, chunk_bytes(rel, files[rel]))
        for k in (1, 3):
            for rel in files:
                c.wait_exists(k, rel, VISIBLE_S)
        for rel in files:
            loc = c.location(1, rel)
            self.assertGreaterEqual(len(holder_ids(loc)), 2, f"{rel}: {loc}")
        on_node2 = [rel for rel in files if 2 in holder_ids(c.location(1, rel))]
        self.assertTrue(on_node2, "no chunk has a copy on node 2: the kill would test nothing")

        c.kill9(2)
        for k in (1, 3):
            for rel, size in files.items():
                self.assert_read_ok_bounded(c, k, rel, rel, size)

        # kvfsctl nodes on a survivor: node 2 down, exit 1; where names node 2 as a down holder
        c.wait_state(1, 2, "down", DOWN_S)
        r = c.kvfsctl("nodes", c.path(1))
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()[2:]
                if line.split() and line.split()[0].isdigit()}
        self.assertEqual(set(rows), {"1", "2", "3"}, r.stdout)
        self.assertIn("down", rows["2"])
        self.assertIn("self", rows["1"])
        self.assertIn("up", rows["3"])
        self.assertIn(c.node(3).address, rows["3"])
        # Repair: every chunk that had a copy on node 2 gets its second live copy back, on the
        # survivors, and kvfsctl where says so.
        def repaired():
            for rel in files:
                loc = c.location(1, rel)
                states = [h["state"] for h in loc["holders"]]
                if len(states) < 2 or not set(states) <= {"self", "up"}:
                    return False
            return True
        wait_until(repaired, REPAIR_S, 0.2, what="every chunk has 2 live holders again")
        r = c.kvfsctl("where", c.path(1, on_node2[0]), "--json")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        loc = json.loads(r.stdout)["where"][0]["location"]
        self.assertEqual(sorted(h["id"] for h in loc["holders"]), [1, 3], loc)
        self.assertGreater(c.nodes_json(1)["repair"]["repaired_chunks"] +
                           c.nodes_json(3)["repair"]["repaired_chunks"], 0)
        for k in (1, 3):
            for rel, size in files.items():
                self.assert_content(c, k, rel, rel, size)

    def test_r1_holders_killed_read_fails_fast_never_hangs(self):
        c = self.cluster(n=3, replicas=1)
        os.mkdir(c.path(1, "one"))
        files = {f"one/f{i}": 40_000 + i for i in range(8)}
        for rel, size in files.items():
            c.publish(1, rel, chunk_bytes(rel, size))
        for rel in files:
            c.wait_exists(3, rel, VISIBLE_S)
        remote = [rel for rel in files if 3 not in holder_ids(c.location(3, rel))]
        local = [rel for rel in files if rel not in remote]
        self.assertTrue(remote, "every chunk landed on node 3: nothing to test")

        c.kill9(1)
        c.kill9(2)
        for rel in remote:
            r = c.read_in_subprocess(3, rel, timeout=READ_BOUND_S + 20)
            self.assertFalse(r["timed_out"], f"read of {rel} with its holders dead hung")
            self.assertFalse(r["ok"], f"read of {rel} succeeded with every holder dead")
            self.assertIn(r["errno"], (errno.ENOENT, errno.EIO), r)
            self.assertLess(r["seconds"], READ_BOUND_S, f"read of {rel} took {r['seconds']:.1f} s")
        for rel in local:
            self.assert_read_ok_bounded(c, 3, rel, rel, files[rel])

    def test_r1_holder_frozen_read_times_out_never_hangs(self):
        # SIGSTOP: the node's sockets still accept, but nothing answers (a hung peer).
        c = self.cluster(n=3, replicas=1)
        os.mkdir(c.path(1, "fz"))
        files = {f"fz/f{i}": 20_000 + i for i in range(8)}
        for rel, size in files.items():
            c.publish(1, rel, chunk_bytes(rel, size))
        for rel in files:
            c.wait_exists(3, rel, VISIBLE_S)
        # With node 2 dead, the chunks that have no copy on node 3 are left only on node 1
        # (the writer keeps a copy of everything it publishes).
        only_on_1 = [rel for rel in files if 3 not in holder_ids(c.location(3, rel))]
        c.kill9(2)
        pid = c.node(1).pid
        freeze(pid)
        try:
            checked = 0
            for rel in only_on_1:
                r = c.read_in_subprocess(3, rel, timeout=READ_BOUND_S + 20)
                self.assertFalse(r["timed_out"], f"read of {rel} from a frozen holder hung")
                if r["ok"]:
                    self.fail(f"read of {rel} succeeded with node 1 frozen and node 2 dead")
                self.assertIn(r["errno"], (errno.ENOENT, errno.EIO), r)
                self.assertLess(r["seconds"], READ_BOUND_S, f"{rel}: {r['seconds']:.1f} s")
                checked += 1
            self.assertGreater(checked, 0, "no chunk held by node 1 alone")
        finally:
            os.kill(pid, signal.SIGCONT)

    def test_frozen_replica_target_costs_one_publish_one_timeout(self):
        # R=2 of 3 with node 3 frozen (its lease still valid for a few seconds): the first
        # publish that places a copy there waits one request timeout and moves on; the ones
        # after it place their copies elsewhere at once instead of each timing out again.
        c = self.cluster(n=3, replicas=2)
        c.publish(1, "warm", chunk_bytes("warm", 1000))
        pid = c.node(3).pid
        freeze(pid)
        took = []
        try:
            for i in range(12):
                t0 = time.monotonic()
                c.publish(1, f"fr{i}", chunk_bytes(f"fr{i}", 200_000))
                took.append(round(time.monotonic() - t0, 3))
        finally:
            os.kill(pid, signal.SIGCONT)
        slow = [t for t in took if t >= 0.8 * REQUEST_TIMEOUT_MS / 1000]
        self.assertLessEqual(len(slow), 1, took)
        for i in (0, 11):
            c.wait_exists(2, f"fr{i}", VISIBLE_S)  # other nodes see a publish within a second
            self.assert_content(c, 2, f"fr{i}", f"fr{i}", 200_000)

    def test_a_peer_frozen_while_idle_is_found_before_a_publish_waits_on_it(self):
        # Node 3 freezes while no request goes to it, and its lease lives (60 s). Node 1 pings
        # each peer that no ping has found for 5 s, so it names node 3 unanswering within
        # seconds, and its publishes place no copy there. Before, only a request found it:
        # kvfsctl nodes named nothing, and the first publish that ranked node 3 sent it a PUT
        # and waited a timeout.
        c = self.cluster(n=3, replicas=2, lease_ttl_s=60)
        c.publish(3, "warm", chunk_bytes("warm", 1000))
        c.wait_exists(1, "warm", VISIBLE_S)
        self.assertEqual(self.read(c, 1, "warm"), chunk_bytes("warm", 1000))

        def row():
            return [n for n in c.nodes_json(1)["nodes"] if n["id"] == 3][0]

        # Past the ping each node gets when it joins (within a second of it), which would find
        # a node frozen that early.
        time.sleep(2.0)
        wait_until(lambda: not row()["unanswering"] and not row()["unreachable"], 15.0, 0.2,
                   what=f"node 1 reaches node 3 before the freeze ({row()})")
        pid = c.node(3).pid
        freeze(pid)
        try:
            wait_until(lambda: row()["unanswering"] and row()["unreachable"], 15.0, 0.2,
                       what=f"node 1 finds node 3 frozen with no request to it ({row()})")
            r = c.kvfsctl("nodes", c.path(1))
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("node 3 is up but let a request from this node time out", r.stderr)
            puts = row()["puts_sent"]
            for i in range(8):
                c.publish(1, f"idle{i}", chunk_bytes(f"idle{i}", 100_000))
                self.assertEqual(sorted(holder_ids(c.location(1, f"idle{i}"))), [1, 2])
            self.assertEqual(row()["puts_sent"], puts, "a PUT went to the frozen node")
            self.assertEqual(c.node_states(1)[3], "up")  # its lease lives on
        finally:
            os.kill(pid, signal.SIGCONT)
        wait_until(lambda: not row()["unanswering"] and not row()["unreachable"], 15.0, 0.2,
                   what=f"node 1 finds node 3 again ({row()})")
        self.assertEqual(c.kvfsctl("nodes", c.path(1)).returncode, 0)

    def test_the_harness_cleanup_stops_every_node_when_keeping_logs_fails(self):
        # KVFS_TEST_KEEP_LOGS naming a directory that cannot be made used to skip every node's
        # stop: the daemons ran on, mounted, after the test (found with 36 leftover mounts).
        c = KvfsCluster(n=2, replicas=1)
        try:
            c.start()
        except BaseException:
            c.cleanup()
            raise
        pids = [c.node(k).pid for k in (1, 2)]
        mounts = [c.path(k) for k in (1, 2)]
        # Should the cleanup under test leave anything, this test does not: a second one.
        self.addCleanup(lambda: c.cleanup() if any(map(os.path.ismount, mounts)) else None)
        with unittest.mock.patch.dict(os.environ, {"KVFS_TEST_KEEP_LOGS": "/dev/null/logs"}):
            with self.assertRaises(OSError):
                c.cleanup()
        for pid in pids:
            wait_until(lambda: not os.path.exists(f"/proc/{pid}") or
                       open(f"/proc/{pid}/stat").read().split(")")[-1].split()[0] == "Z",
                       10.0, what=f"daemon {pid} stopped")
        for m in mounts:
            self.assertFalse(os.path.ismount(m), m)
        self.assertFalse(os.path.exists(c.root))

    def test_killed_node_restarts_and_rejoins(self):
        c = self.cluster(n=3, replicas=2)
        os.mkdir(c.path(3, "j"))
        c.wait_exists(1, "j", VISIBLE_S)
        # Node 3's own chunks: publish until two of them have no copy on node 1, so that
        # node 1 can only read them from node 3 once node 2 is gone.
        own = {}
        only_23 = []
        for i in range(40):
            rel = f"j/own{i}"
            own[rel] = 50_000 + i
            c.publish(3, rel, chunk_bytes(rel, own[rel]))
            if 1 not in holder_ids(c.location(3, rel)):
                only_23.append(rel)
            if len(only_23) >= 2 and len(own) > len(only_23):
                break
        self.assertGreaterEqual(len(only_23), 2, "placement never skipped node 1")
        for rel in own:
            c.wait_exists(1, rel, VISIBLE_S)

        c.kill9(3)
        c.wait_state(1, 3, "down", DOWN_S)
        r = c.kvfsctl("nodes", c.path(1), "--json")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertEqual({n["id"]: n["state"] for n in json.loads(r.stdout)["nodes"]},
                         {1: "self", 2: "up", 3: "down"})
        # While node 3 is down: new chunks, and one of node 3's chunks unlinked.
        late = {f"j/late{i}": 60_000 + i for i in range(4)}
        for rel, size in late.items():
            c.publish(1, rel, chunk_bytes(rel, size))
        gone = next(rel for rel in sorted(own) if rel not in only_23)
        os.unlink(c.path(1, gone))

        c.restart(3)
        for rel in late:
            c.wait_exists(3, rel, 10.0)
        c.wait_gone(3, gone, 10.0)
        for rel, size in late.items():
            self.assert_read_ok_bounded(c, 3, rel, rel, size)
        for rel, size in own.items():
            if rel != gone:
                self.assert_read_ok_bounded(c, 3, rel, rel, size)
        c.wait_state(1, 3, "up", DOWN_S)

        # Node 3 serves its chunks again: with node 2 gone, node 1 reads them (from node 3, or
        # from its own copy if repair made one while node 3 was down).
        c.kill9(2)
        for rel in only_23:
            self.assert_read_ok_bounded(c, 1, rel, rel, own[rel])

    def test_wrong_secret_node_gets_no_data(self):
        # The shared secret guards chunk data: a node with another secret finds the namespace
        # in etcd (etcd's own TLS guards that) but no peer serves it or takes its chunks.
        c = self.cluster(n=3, replicas=2, secrets={3: b"not the cluster's secret"},
                         start_nodes=[1, 2])
        os.mkdir(c.path(1, "s"))
        for i in range(3):
            c.publish(1, f"s/f{i}", chunk_bytes(f"s{i}", 10_000))
        c.wait_exists(2, "s/f2", VISIBLE_S)
        c.start_node(3)
        c.wait_exists(3, "s/f2", VISIBLE_S)
        for i in range(3):
            r = c.read_in_subprocess(3, f"s/f{i}", timeout=READ_BOUND_S + 20)
            self.assertFalse(r["timed_out"], "read on the wrong-secret node hung")
            self.assertFalse(r["ok"], f"node 3 read s/f{i} with a wrong secret")
            self.assertEqual(r["errno"], errno.EIO, r)
        wait_until(lambda: re.search(r"handshake refused", c.log(1) + c.log(2)), 15.0,
                   what="a good node logs the refused handshake")
        # What node 3 publishes keeps its only copy there: no peer accepted it.
        c.publish(3, "intruder", b"x" * 100_000)
        c.wait_exists(1, "intruder", VISIBLE_S)
        self.assertEqual(holder_ids(c.location(1, "intruder")), [3])
        for k in (1, 2):
            self.assertEqual(sorted(os.listdir(c.path(k, "s"))), ["f0", "f1", "f2"])
            for i in range(3):
                self.assert_content(c, k, f"s/f{i}", f"s{i}", 10_000)


if __name__ == "__main__":
    unittest.main()
