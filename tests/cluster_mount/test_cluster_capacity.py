"""A kvfs cluster at the edge of its capacity, through real mounts
(tests/pylib/kvfs_cluster.py): a node whose disk fills refuses publishes (EROFS, ENOSPC) until it
has room again, a full node evicts to its watermark and publishes on, a holder's eviction counts
other nodes' reads of its copies and keeps serving a copy evicted under one of them, and writers
on every node past capacity leave readers only whole versions.

Every test starts its own cluster on loopback (free ports) with a 1 s request timeout, and stops
it by PID at the end."""

import errno
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest

from kvfs_cluster import start_cluster, wait_until
from kvfs_testlib import chunk_bytes, write_file_atomic, freeze

REQUEST_TIMEOUT_MS = 1000
VISIBLE_S = 5.0


def read_to_end(fd: int, got: list, size: int) -> bytes:
    """Reads fd on from the end of the pieces already in `got` to `size`, 1 MiB at a time;
    returns every byte. An early end of file is a failure."""
    off = sum(len(p) for p in got)
    while off < size:
        piece = os.pread(fd, 1 << 20, off)
        if not piece:
            raise AssertionError(f"EOF at {off} of {size}")
        got.append(piece)
        off += len(piece)
    return b"".join(got)


class ClusterCapacity(unittest.TestCase):
    def cluster(self, **kw):
        kw.setdefault("request_timeout_ms", REQUEST_TIMEOUT_MS)
        return start_cluster(self, **kw)

    def assert_content(self, c, k, rel, name, size):
        with open(c.path(k, rel), "rb") as f:
            data = f.read()
        self.assertEqual(len(data), size, f"{rel} on node {k}: size")
        self.assertTrue(data == chunk_bytes(name, size), f"{rel} on node {k}: content differs")

    def test_a_node_whose_disk_fills_refuses_publishes_until_it_has_room_again(self):
        # Node 2's data directory fills up (another program's file beside its device file):
        # its journal cannot grow, its store turns read-only, and its publishes fail with
        # EROFS. Those files never reached etcd; node 2 kept showing their names (which no
        # other node had) until a restart, because only an etcd refusal's EROFS was reset.
        # The other nodes publish on.
        mounted = []  # (tmpfs, cluster root) to remove once the cluster is stopped

        def unmount():
            for data, root in mounted:
                subprocess.run(["umount", "-l", data], check=False)
                shutil.rmtree(root, ignore_errors=True)
        self.addCleanup(unmount)  # registered first: runs after the cluster's own cleanup
        c = self.cluster(start_nodes=[1, 3], capacity="24M")
        data = c.node(2).mount._data
        if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40M", "tmpfs", data],
                          capture_output=True).returncode != 0:
            self.skipTest("cannot mount a tmpfs for node 2's data (needs root, not in a chroot)")
        mounted.append((data, c.root))
        c.start_node(2)
        c.wait_joined([1, 2, 3])
        os.mkdir(c.path(1, "d"))
        c.wait_exists(2, "d")
        fd = os.open(os.path.join(data, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * (1 << 20))
        except OSError as e:
            self.assertEqual(e.errno, errno.ENOSPC)
        finally:
            os.close(fd)
        outcomes = {1: [], 2: [], 3: []}
        for i in range(30):  # the journal's last block fills after about ten of node 2's
            for k in (1, 2, 3):
                try:
                    write_file_atomic(c.path(k, f"d/n{k}-{i}"), os.urandom(512 << 10),
                                      tmp_suffix=".tmp")
                    outcomes[k].append("ok")
                except OSError as e:
                    outcomes[k].append(errno.errorcode[e.errno])
        self.assertEqual(set(outcomes[1]), {"ok"}, outcomes)
        self.assertEqual(set(outcomes[3]), {"ok"}, outcomes)
        self.assertIn("EROFS", outcomes[2], outcomes)
        self.assertIn("read-only", c.log(2))

        def same_names():
            return (sorted(os.listdir(c.path(2, "d"))) == sorted(os.listdir(c.path(1, "d")))
                    == sorted(os.listdir(c.path(3, "d"))))
        wait_until(same_names, VISIBLE_S, what="every node shows the same names")
        self.assertFalse([n for n in os.listdir(c.path(2, "d")) if n.endswith(".tmp")])
        for name in os.listdir(c.path(2, "d")):  # node 2 still reads what the cluster holds
            try:
                with open(c.path(2, "d/" + name), "rb") as f:
                    self.assertEqual(len(f.read()), 512 << 10)
            except OSError as e:
                # The cluster is past its capacity: a file whose last copy is evicted between
                # the listing and the read fails (EIO from the holder that just dropped it, as
                # in CI on 2026-11-29), and its name goes from every node.
                self.assertIn(e.errno, (errno.EIO, errno.ENOENT), name)
                c.wait_gone(2, "d/" + name, VISIBLE_S)
        # Room again: node 2's store takes changes by itself, and the others see them.
        os.unlink(os.path.join(data, "filler"))
        payload = os.urandom(512 << 10)

        def publishes():
            try:
                write_file_atomic(c.path(2, "d/after"), payload, tmp_suffix=".tmp")
                return True
            except OSError as e:
                self.assertEqual(e.errno, errno.EROFS, e)
                return False
        wait_until(publishes, 20, interval=0.2, what="node 2 publishes again once its disk has room")
        for k in (1, 3):
            c.wait_exists(k, "d/after")
            with open(c.path(k, "d/after"), "rb") as f:
                self.assertEqual(f.read(), payload)
        wait_until(same_names, VISIBLE_S, what="every node shows the same names")

    def test_a_full_node_evicts_to_its_watermark_and_publishes_on(self):
        # A cache is written past its capacity and must evict, never refuse: nodes 1 and 3
        # publish 4x a node's capacity, node 3 over node 1's names. Copies a node drops or evicts
        # must free their space at once, or the writer's retry finds no room, evicts the
        # next file, and so on until the whole cache is gone and close fails with ENOSPC.
        capacity = 48 << 20
        c = self.cluster(n=3, replicas=2, capacity="48M")
        size = 3 * (1 << 20) + 1
        # A temp name of each node's own: with one shared temp name, node 3 could open node
        # 1's temp file a moment before node 1's rename of it reached node 3, and its own
        # rename then finds no temp name (ENOENT; 2 in 300 such pairs here, docs/cluster.md).
        for i in range(32):
            c.publish(1, f"full/f{i}", chunk_bytes(f"a{i}", size), tmp_suffix=".tmp1")
            c.publish(3, f"full/f{i}", chunk_bytes(f"b{i}", size), tmp_suffix=".tmp3")
        for k in (1, 2, 3):
            st = c.nodes[k].mount.status()
            self.assertLessEqual(st["used_bytes"], capacity, st)
            # Eviction stops at the low watermark (0.8): well over a third of the cache is
            # still there once the writes settle (the rest may be replaced versions on hold).
            wait_until(lambda: c.nodes[k].mount.status()["stored_bytes"] >= capacity // 3,
                       10, what=f"node {k} keeps a third of its cache: {st}")
        # The last versions are whole wherever they are read.
        for i in (30, 31):
            self.assert_content(c, 2, f"full/f{i}", f"b{i}", size)

    def test_a_chunk_only_other_nodes_read_outlives_the_unread_ones_on_its_holder(self):
        # Node 2 holds the only copy (R=1, the writer's own) of what it publishes, and node 1
        # reads one of those files. Node 2's eviction must count that read: a peer's read used
        # to leave no trace on the holder, so a chunk every other node read but its holder never
        # opened looked coldest there and went first (and a reader elsewhere could lose it
        # mid-read while the holder kept chunks nobody wanted).
        c = self.cluster(n=2, replicas=1, capacity="24M")
        size = 2 << 20
        for i in range(4):
            c.publish(2, f"lru/a{i}", chunk_bytes(f"a{i}", size))
        c.wait_exists(1, "lru/a3", VISIBLE_S)
        self.assertEqual([h["id"] for h in c.location(1, "lru/a0")["holders"]], [2])
        self.assert_content(c, 1, "lru/a0", "a0", size)  # from node 2's copy
        # Node 2 publishes on until its eviction (least recently used first) takes a1, which
        # it wrote after a0 and nobody read.
        for i in range(16):
            if not os.path.lexists(c.path(2, "lru/a1")):
                break
            c.publish(2, f"lru/b{i}", chunk_bytes(f"b{i}", size))
        else:
            self.fail(f"node 2 never evicted a1: {c.nodes[2].mount.status()}")
        self.assertTrue(os.path.lexists(c.path(2, "lru/a0")),
                        f"a0, read by node 1, was evicted before the unread a1: "
                        f"{sorted(os.listdir(c.path(2, 'lru')))}")
        self.assert_content(c, 2, "lru/a0", "a0", size)

    def test_a_copy_evicted_under_a_reader_on_another_node_serves_it_to_the_end(self):
        # Node 2 holds the only copy (R=1) of a file that node 1 is reading, and evicts it
        # midway (explicitly here; at capacity its eviction would). A local open file keeps an
        # evicted file whole; node 1's did not: its next piece found no copy (EIO). Now the
        # copy is served for a grace after its eviction, and its space comes back after it.
        c = self.cluster(n=2, replicas=1, capacity="512M")
        size = 20 << 20  # 10 pieces of 2 MiB; node 1 fetches 4 ahead of its reader
        data = chunk_bytes("ev", size)
        c.publish(2, "ev/big", data)
        c.wait_exists(1, "ev/big", VISIBLE_S)
        self.assertEqual([h["id"] for h in c.location(1, "ev/big")["holders"]], [2])
        used = c.nodes[2].mount.status()["used_bytes"]
        fd = os.open(c.path(1, "ev/big"), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no kernel read-ahead
            got = [os.pread(fd, 1 << 20, 0)]
            os.setxattr(c.path(2, "ev/big"), "user.kvfs.evict", b"1")
            c.wait_gone(1, "ev/big", VISIBLE_S)  # the last copy left: the name is gone
            self.assertTrue(read_to_end(fd, got, size) == data, "node 1 read other bytes")
        finally:
            os.close(fd)
        wait_until(lambda: c.nodes[2].mount.status()["used_bytes"] <= used - size // 2, 15,
                   what="node 2's space comes back once the grace ends")

    def test_a_reader_on_another_node_that_pauses_keeps_its_file_to_the_end(self):
        # Node 2 holds the only copies (R=1) of three files node 1 has open and pauses reading
        # past the holder's grace (5 s) while node 2 unlinks one, publishes over another and
        # evicts the third. A local open file keeps its bytes however long its reader pauses;
        # node 1's reads failed with EIO at the next piece after the grace. Now node 1 keeps
        # the copies served while its files are open, and node 2's space comes back after.
        c = self.cluster(n=2, replicas=1, capacity="1G")
        size = 16 << 20  # 8 pieces of 2 MiB; node 1 fetches 4 ahead of its reader
        names = {"gone": "pa/unlinked", "old": "pa/replaced", "evicted": "pa/evicted"}
        for key, rel in names.items():
            c.publish(2, rel, chunk_bytes(key, size))
        for rel in names.values():
            c.wait_exists(1, rel, VISIBLE_S)
            self.assertEqual([h["id"] for h in c.location(1, rel)["holders"]], [2])
        used = c.nodes[2].mount.status()["used_bytes"]
        fds = {key: os.open(c.path(1, rel), os.O_RDONLY) for key, rel in names.items()}
        try:
            got = {}
            for key, fd in fds.items():
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no kernel read-ahead
                got[key] = [os.pread(fd, 1 << 20, 0)]
            os.unlink(c.path(2, names["gone"]))
            write_file_atomic(c.path(2, names["old"]), chunk_bytes("new", size))
            os.setxattr(c.path(2, names["evicted"]), "user.kvfs.evict", b"1")
            c.wait_gone(1, names["gone"], VISIBLE_S)
            c.wait_gone(1, names["evicted"], VISIBLE_S)
            time.sleep(8)  # past the grace, without a read
            for key, fd in fds.items():
                self.assertTrue(read_to_end(fd, got[key], size) == chunk_bytes(key, size),
                                f"{key}: node 1 read other bytes")
        finally:
            for fd in fds.values():
                os.close(fd)
        self.assert_content(c, 1, names["old"], "new", size)
        # Once closed, the three old copies go (the new version stays).
        wait_until(lambda: c.nodes[2].mount.status()["used_bytes"] <= used - size * 3 // 2, 20,
                   what="node 2's space comes back once the files are closed")

    def test_a_holder_frozen_past_the_grace_still_serves_an_open_reader_after_it_resumes(self):
        # Node 2 holds the only copy (R=1) of a file node 1 has open; node 2 unlinks it and is
        # frozen (SIGSTOP: a paused VM, a stalled host) past the grace of dropped copies. Node
        # 1's keep-alives could not reach it meanwhile; on resuming, node 2 freed the copy at
        # once and node 1's next read failed with EIO. Time a node did not run does not count.
        c = self.cluster(n=2, replicas=1, capacity="1G")
        size = 16 << 20
        c.publish(2, "fz/f", chunk_bytes("fz", size))
        c.wait_exists(1, "fz/f", VISIBLE_S)
        fd = os.open(c.path(1, "fz/f"), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)  # no kernel read-ahead
            got = [os.pread(fd, 1 << 20, 0)]
            os.unlink(c.path(2, "fz/f"))
            c.wait_gone(1, "fz/f", VISIBLE_S)
            pid = c.nodes[2].pid
            freeze(pid)
            try:
                time.sleep(8)  # past the grace (5 s) and node 2's lease (3 s)
            finally:
                os.kill(pid, signal.SIGCONT)
            c.wait_state(1, 2, "up")
            self.assertTrue(read_to_end(fd, got, size) == chunk_bytes("fz", size),
                            "node 1 read other bytes")
        finally:
            os.close(fd)

    def test_a_copy_sent_back_to_a_node_still_serving_its_evicted_one_is_held(self):
        # A copy evicted under a peer's reader is served for a grace (the test above). If repair
        # sends the chunk back meanwhile, that node must take the new copy: answering "already
        # here" for the retiring one put it on the holder list with no copy once the grace
        # ended. Node Y is drained, so repair can only send the chunk back to the node that
        # evicted it.
        c = self.cluster(n=3, replicas=2)
        data = chunk_bytes("rp", 4 << 20)
        c.publish(1, "rp/f", data)
        holders = [h["id"] for h in c.location(1, "rp/f")["holders"]]
        self.assertEqual(len(holders), 2, holders)
        [y] = [k for k in (1, 2, 3) if k not in holders]
        r = c.kvfsctl("drain", c.path(y))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        c.wait_state(holders[0], y, "draining")
        c.wait_state(holders[1], y, "draining")
        c.wait_exists(y, "rp/f", VISIBLE_S)
        self.assert_content(c, y, "rp/f", "rp", len(data))  # served by the first holder
        first, other = holders
        os.setxattr(c.path(first, "rp/f"), "user.kvfs.evict", b"1")

        def holders_again():
            return sorted(h["id"] for h in c.location(other, "rp/f")["holders"]) == sorted(holders)
        wait_until(holders_again, 20, 0.1, what=f"repair sends the chunk back to node {first}")
        time.sleep(7)  # past the grace of the evicted copy
        self.assertTrue(c.location(first, "rp/f")["local"],
                        f"node {first} is on the holder list without a copy")
        self.assert_content(c, first, "rp/f", "rp", len(data))

    def test_writers_on_every_node_past_capacity_readers_see_whole_versions(self):
        # Every node publishes over shared names while every node reads them, 2x what the
        # cluster holds: writes never fail, and a read returns one whole version (each file
        # carries its own version in a header) or ENOENT (evicted). A read racing the eviction
        # of the copies it was sent to may fail with EIO (counted, printed, not asserted:
        # how often depends on the machine's speed).
        size = 3 * (1 << 20) + 7
        names = [f"w/n{i}" for i in range(24)]

        def version(name, tag):
            head = f"{name}:{tag}".encode().ljust(64, b"\0")
            return head + chunk_bytes(f"{name}:{tag}", size - 64)

        c = self.cluster(n=3, replicas=2, capacity="48M")
        os.mkdir(c.path(1, "w"))
        for k in (2, 3):
            c.wait_exists(k, "w", VISIBLE_S)
        failures, wrong, outcomes = [], [], {"whole": 0, "enoent": 0, "eio": 0}
        lock = threading.Lock()
        writes = 22  # per node: 3 x 22 x 3 MiB, about 2x the 96 MiB the cluster holds (R=2)

        def writer(k):
            for v in range(writes):
                name = names[(v * 7 + k * 5) % len(names)]
                try:
                    c.publish(k, name, version(name, f"{k}.{v}"), tmp_suffix=f".tmp{k}")
                except OSError as e:
                    failures.append((k, name, e.errno))

        def reader(k, stop):
            i = 0
            while not stop.is_set():
                name = names[(i * 11 + k) % len(names)]
                i += 1
                try:
                    with open(c.path(k, name), "rb") as f:
                        data = f.read()
                except OSError as e:
                    key = {errno.ENOENT: "enoent", errno.EIO: "eio"}.get(e.errno)
                    if key is None:
                        failures.append(("read", k, name, e.errno))
                    else:
                        with lock:
                            outcomes[key] += 1
                    time.sleep(0.002)
                    continue
                tag = data[:64].rstrip(b"\0").decode(errors="replace")
                if len(data) != size or not tag.startswith(name + ":") \
                        or data != version(name, tag.split(":", 1)[1]):
                    wrong.append((k, name, len(data), tag))
                else:
                    with lock:
                        outcomes["whole"] += 1

        stop = threading.Event()
        readers = [threading.Thread(target=reader, args=(k, stop)) for k in (1, 2, 3)]
        writers = [threading.Thread(target=writer, args=(k,)) for k in (1, 2, 3)]
        for t in readers + writers:
            t.start()
        for t in writers:
            t.join()
        stop.set()
        for t in readers:
            t.join()
        print(f"reads: {outcomes}", file=sys.stderr)
        self.assertEqual(wrong, [])
        self.assertEqual(failures, [])
        self.assertGreater(outcomes["whole"], 0, outcomes)
        for k in (1, 2, 3):
            st = c.nodes[k].mount.status()
            self.assertLessEqual(st["used_bytes"], 48 << 20, st)


if __name__ == "__main__":
    unittest.main()
