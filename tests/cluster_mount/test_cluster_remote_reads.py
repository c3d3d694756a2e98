"""Reads of chunks through a cluster's mounts from the other node's copy (tests/pylib/
kvfs_cluster.py, 2 nodes on loopback): an open that the kernel's page cache cannot serve starts
the fetch of the first piece; concurrent READs of one remote handle are byte-exact; a corrupt
copy, remote or local, never reaches the reader.

Every test starts its own cluster with a 1 s request timeout and stops it by PID at the end;
reads that may fail run in a child process with a hard timeout."""

import errno
import json
import mmap
import os
import signal
import threading
import time
import unittest

import test_cluster_mount as base  # a module, not its class: its tests are not run from here
from kvfs_cluster import wait_until
from kvfs_testlib import chunk_bytes, freeze
from test_cluster_mount import (DOWN_S, READ_BOUND_S, REPAIR_S, REQUEST_TIMEOUT_MS, VISIBLE_S,
                                holder_ids)


def gets_sent(c, k, to):
    """GETs node k has sent to node `to` (its .kvfs/nodes row for that peer)."""
    (row,) = [n for n in c.nodes_json(k)["nodes"] if n["id"] == to]
    return int(row.get("gets_sent", 0))


def open_files(c, k):
    """Handles node k has not released yet (.kvfs/stats open_files)."""
    with open(c.path(k, ".kvfs/stats")) as f:
        stats = dict(line.split() for line in f if line.strip())
    return int(float(stats["open_files"]))


class ClusterRemoteReads(unittest.TestCase):
    # The same cluster start and bounded read as the main module's tests.
    cluster = base.ClusterMount.cluster
    assert_read_ok_bounded = base.ClusterMount.assert_read_ok_bounded
    read = base.ClusterMount.read

    def publish_remote_to_2(self, c, name, data):
        """Publishes `name` on node 1 and checks that node 2 sees it held by node 1 alone, so
        node 2's reads of it are remote (R=1)."""
        c.publish(1, name, data)
        c.wait_exists(2, name, VISIBLE_S)
        loc = c.location(2, name)
        self.assertEqual(holder_ids(loc), [1], loc)
        self.assertFalse(loc["local"], loc)

    def test_concurrent_reads_of_one_remote_handle_are_byte_exact(self):
        # Node 2 holds nothing: every READ goes through its PeerReader. Several threads read
        # one O_DIRECT handle (each pread is one READ) in interleaved stripes, out of order,
        # then a buffered whole-file read lets the kernel's readahead send READs in parallel.
        c = self.cluster(n=2, replicas=1)
        size = 24 * (1 << 20) + 321
        data = chunk_bytes("remote-concurrent", size)
        self.publish_remote_to_2(c, "rc", data)
        fd = os.open(c.path(2, "rc"), os.O_RDONLY | os.O_DIRECT)
        wrong = []
        stripe = 192 * 1024

        def reader(t):
            for rnd in range(2):
                offsets = list(range(t * stripe, size, 4 * stripe))
                if (t + rnd) % 2:
                    offsets.reverse()
                for off in offsets:
                    got = os.pread(fd, stripe, off)
                    if got != data[off:off + stripe]:
                        wrong.append((t, off, len(got)))
        try:
            threads = [threading.Thread(target=reader, args=(t,)) for t in range(4)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        finally:
            os.close(fd)
        self.assertEqual(wrong, [])
        self.assert_read_ok_bounded(c, 2, "rc", "remote-concurrent", size)

    def test_a_cold_open_fetches_the_first_piece_a_cached_one_does_not(self):
        # Node 2's first open of a chunk only node 1 holds cannot be served by its page cache:
        # the fetch of the first piece starts at open, before the first READ. A re-open of the
        # version node 2 has read keeps the page cache and sends nothing.
        c = self.cluster(n=2, replicas=1)
        size = 5 * (1 << 20) + 9
        data = chunk_bytes("prefetch", size)
        self.publish_remote_to_2(c, "pf", data)

        def open_close(flags, since, want):
            # Held open while waiting: a prefetch still queued when its reader is released is
            # dropped without its GET (a loaded machine may take that long to start it).
            fd = os.open(c.path(2, "pf"), flags)
            try:
                wait_until(lambda: gets_sent(c, 2, 1) >= since + want, VISIBLE_S, 0.01,
                           what="node 2's prefetch GET")
            finally:
                os.close(fd)
            self.assertEqual(gets_sent(c, 2, 1), since + want)

        open_close(os.O_RDONLY, gets_sent(c, 2, 1), 1)  # one 2 MiB piece
        with open(c.path(2, "pf"), "rb") as f:
            self.assertTrue(f.read() == data)
        since = gets_sent(c, 2, 1)
        fd = os.open(c.path(2, "pf"), os.O_RDONLY)  # keeps the page cache: no GET
        os.close(fd)
        open_close(os.O_RDONLY | os.O_DIRECT, since, 1)  # around the cache: one GET, not two

    def test_releasing_a_reader_does_not_wait_for_a_frozen_holder(self):
        # A cold open starts the GET of the first piece; with the only holder frozen, that GET
        # waits for the request timeout. The release of the handle must not: it used to wait
        # for the reader's GETs, holding a FUSE thread for the whole timeout per closed file.
        c = self.cluster(n=2, replicas=1, request_timeout_ms=5000)
        self.publish_remote_to_2(c, "rel", chunk_bytes("rel", 3 << 20))
        before = gets_sent(c, 2, 1)
        pid = c.node(1).pid
        freeze(pid)
        try:
            fd = os.open(c.path(2, "rel"), os.O_RDONLY)
            wait_until(lambda: gets_sent(c, 2, 1) > before, VISIBLE_S, 0.01,
                       what="node 2's prefetch GET")
            t0 = time.monotonic()
            os.close(fd)
            wait_until(lambda: open_files(c, 2) == 0, 10.0, 0.01,
                       what="node 2 releases the handle")
            released = time.monotonic() - t0
        finally:
            os.kill(pid, signal.SIGCONT)
        self.assertLess(released, 2.5, f"the release took {released:.2f} s (timeout 5 s)")

    def test_a_frozen_holder_is_read_from_as_soon_as_it_resumes(self):
        # Node 1 holds the only copy. While it is frozen (SIGSTOP), node 2's first read waits one
        # timeout and fails, and the next fails without waiting. Once node 1 resumes, node 2's
        # next read must be served: it failed with EIO for the 1-2 s until a ping found node 1
        # again, and for up to 10 s when node 1 had been found again shortly before. A lease of
        # 10 s: node 1 stays "up" through freezes of a few seconds on a loaded machine.
        c = self.cluster(n=2, replicas=1, lease_ttl_s=10)
        data = chunk_bytes("thaw", 3 << 20)
        self.publish_remote_to_2(c, "thaw", data)
        pid = c.node(1).pid

        def read_cold():
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("1\n")  # node 2 must ask node 1, not its page cache
            return c.read_in_subprocess(2, "thaw", timeout=READ_BOUND_S + 20)

        for round_ in (1, 2):  # the second begins within a second of the first one's end
            freeze(pid)
            try:
                for attempt in (1, 2):
                    r = read_cold()
                    self.assertFalse(r["timed_out"], f"freeze {round_}: the read hung")
                    self.assertEqual(r["errno"], errno.EIO, f"freeze {round_}, read {attempt}")
                    if attempt == 2:  # node 1 is known unresponsive: no second timeout
                        self.assertLess(r["read_seconds"], REQUEST_TIMEOUT_MS / 1000, r)
                # Its lease still lives ("up"), but the operator is told.
                row = [n for n in c.nodes_json(2)["nodes"] if n["id"] == 1][0]
                self.assertEqual((row["state"], row["unanswering"]), ("up", True), row)
                self.assertGreater(row["failures"], 0, row)
                r = c.kvfsctl("nodes", c.path(2))
                self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
                self.assertIn("node 1 is up but let a request from this node time out", r.stderr)
            finally:
                os.kill(pid, signal.SIGCONT)
            r = read_cold()
            self.assertTrue(r["ok"], f"freeze {round_}: read after the resume: errno {r['errno']}")
            self.assertTrue(r["data"] == data, f"freeze {round_}: other bytes")
            if round_ == 1:
                # Found again. (After the second freeze, soon after, only the reads that have no
                # other holder ask it until its suspicion runs out: a node that answers pings
                # but lets requests time out must not cost every publish a timeout.)
                r = c.kvfsctl("nodes", c.path(2))
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_a_frozen_first_holder_costs_a_read_a_hedge_delay_not_a_timeout(self):
        # R=2 on 3 nodes; node 3 reads files held by nodes 1 and 2 while the holder it asks
        # first is frozen, its lease alive. Each READ that waits for a piece asks the other
        # holder too after a hedge delay (a 10 s timeout: 250 ms), so the read takes far less
        # than the timeout. Before, each read waited the whole timeout for the frozen holder.
        timeout_s = 10
        c = self.cluster(n=3, replicas=2, request_timeout_ms=timeout_s * 1000, lease_ttl_s=30)
        files = {}
        for i in range(40):  # those held by nodes 1 and 2, none by node 3
            name, data = f"h{i}", chunk_bytes(f"hedge{i}", (12 << 20) + i)
            c.publish(1, name, data)
            c.wait_exists(3, name, VISIBLE_S)
            if sorted(holder_ids(c.location(3, name))) == [1, 2]:
                files[name] = data
            if len(files) == 2:
                break
        self.assertEqual(len(files), 2, "no two files held by nodes 1 and 2 alone")
        first = {holder_ids(c.location(3, name))[0] for name in files}
        self.assertEqual(len(first), 1, "the files' holder lists start with different nodes")
        frozen = first.pop()
        pid = c.node(frozen).pid
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("1\n")  # node 3 must ask the holders, not its page cache
        freeze(pid)
        try:
            for name, data in files.items():
                r = c.read_in_subprocess(3, name, timeout=timeout_s * 3)
                self.assertFalse(r["timed_out"], f"{name}: the read hung")
                self.assertTrue(r["ok"], f"{name}: errno {r['errno']}")
                self.assertTrue(r["data"] == data, f"{name}: other bytes")
                # A bound far from both: 0.3-1 s when hedged, at least 10 s when not.
                self.assertLess(r["read_seconds"], timeout_s / 2, name)
            (row,) = [n for n in c.nodes_json(3)["nodes"] if n["id"] == frozen]
            self.assertGreater(row["hedged_around"], 0, row)
            # kvfsctl verify and the copy of the old bytes for a write in place read the
            # same way (before, each waited the whole timeout on the frozen holder).
            t0 = time.monotonic()
            r = c.kvfsctl("verify", *[c.path(3, name) for name in files], timeout=timeout_s * 3)
            verify_s = time.monotonic() - t0
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertLess(verify_s, timeout_s / 2, r.stdout)
            name, data = next(iter(files.items()))
            fd = os.open(c.path(3, name), os.O_WRONLY)
            try:
                t0 = time.monotonic()
                os.pwrite(fd, b"X", 5 << 20)
                write_s = time.monotonic() - t0
            finally:
                os.kill(pid, signal.SIGCONT)  # the publish at close may place on it
                os.close(fd)
            self.assertLess(write_s, timeout_s / 2)
            with open(c.path(3, name), "rb") as f:
                self.assertTrue(f.read() == data[: 5 << 20] + b"X" + data[(5 << 20) + 1 :])
        finally:
            os.kill(pid, signal.SIGCONT)
        self.assertTrue(c.node(frozen).running())

    def test_writing_files_of_a_frozen_holder_stalls_no_other_operation(self):
        # Node 2 opens for writing two files only the frozen node 1 holds. A rewrite (O_TRUNC)
        # needs none of the old bytes and publishes at once. A write in place needs them: it
        # waits for the GET (one request timeout) and fails with EIO, while node 2's other
        # operations go on. (The open used to copy the whole base, under the namespace lock:
        # the rewrite failed, and every lookup of the node waited out the timeout.)
        c = self.cluster(n=2, replicas=1, request_timeout_ms=5000)
        old_ip = chunk_bytes("ip", 3 << 20)
        self.publish_remote_to_2(c, "rw", chunk_bytes("rw", 3 << 20))
        self.publish_remote_to_2(c, "ip", old_ip)
        c.publish(2, "other", b"local")
        pid = c.node(1).pid
        result = {}

        def write_in_place():
            try:
                fd = os.open(c.path(2, "ip"), os.O_WRONLY)
                try:
                    os.pwrite(fd, b"X", 0)
                finally:
                    os.close(fd)
                result["ok"] = True
            except OSError as e:
                result["errno"] = e.errno

        freeze(pid)
        try:
            t0 = time.monotonic()
            with open(c.path(2, "rw"), "wb") as f:
                f.write(b"rewritten")
            rewrite_s = time.monotonic() - t0
            writer = threading.Thread(target=write_in_place)
            writer.start()
            time.sleep(0.5)  # its open is done, its first WRITE waits for node 1
            t0 = time.monotonic()
            os.stat(c.path(2, "other"))
            self.assertIn("other", os.listdir(c.path(2)))
            with open(c.path(2, "other"), "rb") as f:
                self.assertEqual(f.read(), b"local")
            others_s = time.monotonic() - t0
            writer.join(30)
        finally:
            os.kill(pid, signal.SIGCONT)
        self.assertLess(rewrite_s, 2.5, f"the rewrite took {rewrite_s:.2f} s (timeout 5 s)")
        self.assertLess(others_s, 1.0, f"other operations took {others_s:.2f} s")
        self.assertEqual(result, {"errno": errno.EIO})
        for k in (1, 2):
            wait_until(lambda: self.read(c, k, "rw") == b"rewritten", VISIBLE_S,
                       what=f"the rewrite on node {k}")
        self.assertTrue(self.read(c, 1, "ip") == old_ip)
        self.assertTrue(self.read(c, 2, "ip") == old_ip)  # node 1, suspect, is pinged and asked

    def test_files_held_open_unread_prefetch_within_a_budget(self):
        # 150 remote files of one 2 MiB piece each, opened on node 2 and held open unread: the
        # prefetches stop at the readers' budget (256 MiB, 128 pieces) instead of pinning
        # 300 MiB; closed, the budget is free again, and every file still reads byte-exact.
        c = self.cluster(n=2, replicas=1, capacity="512M")  # 300 MiB of files, no eviction
        size = 2 << 20
        names = [f"held/f{i}" for i in range(150)]
        os.mkdir(c.path(1, "held"))
        for name in names:
            c.publish(1, name, chunk_bytes(name, size))
        for name in names:
            c.wait_exists(2, name, VISIBLE_S)
        self.assertEqual(holder_ids(c.location(2, names[-1])), [1])
        before = gets_sent(c, 2, 1)
        fds = [os.open(c.path(2, name), os.O_RDONLY) for name in names]
        try:
            wait_until(lambda: gets_sent(c, 2, 1) - before >= 128, VISIBLE_S, 0.05,
                       what="node 2's prefetches")
            self.assertEqual(gets_sent(c, 2, 1) - before, 128)
        finally:
            for fd in fds:
                os.close(fd)
        # Releases come after close(2) returns: the budget is free once they are done.
        def prefetches_again():
            since = gets_sent(c, 2, 1)
            fd = os.open(c.path(2, names[0]), os.O_RDONLY | os.O_DIRECT)
            os.close(fd)
            time.sleep(0.05)
            return gets_sent(c, 2, 1) > since
        wait_until(prefetches_again, VISIBLE_S, 0.05, what="a prefetch after the releases")
        for name in (names[0], names[77], names[-1]):
            with open(c.path(2, name), "rb") as f:
                self.assertTrue(f.read() == chunk_bytes(name, size), name)

    def test_a_prefetch_that_failed_is_tried_again_by_the_read(self):
        # The holder is frozen when node 2 opens the file: the GET started at open times out
        # and the holder is suspect. It comes back; a read after that must fetch again, not
        # fail with the error of a GET no READ had asked for.
        c = self.cluster(n=2, replicas=1)
        size = 3 * (1 << 20) + 11
        data = chunk_bytes("refetch", size)
        self.publish_remote_to_2(c, "rf", data)
        pid = c.node(1).pid
        freeze(pid)
        try:
            # O_DIRECT: the READ's error reaches the reader (a failed readahead READ of a
            # buffered read is retried by the kernel with a READ of its own).
            fd = os.open(c.path(2, "rf"), os.O_RDONLY | os.O_DIRECT)
            time.sleep(REQUEST_TIMEOUT_MS / 1000 + 1)  # the prefetch has timed out by now
        finally:
            os.kill(pid, signal.SIGCONT)
        try:
            buf = mmap.mmap(-1, (size + 4095) // 4096 * 4096)  # page-aligned, for O_DIRECT
            got = os.preadv(fd, [buf], 0)
            self.assertEqual(got, size)
            self.assertTrue(buf[:size] == data)
        finally:
            os.close(fd)

    def flip_stored_byte(self, c, k, data):
        """Flips one byte of node k's copy of `data`, in its second MiB, on node k's device file
        (found by its content: the chunk is stored raw, its bytes do not compress). The node
        reads its devices with O_DIRECT, which sees the write."""
        probe = data[(3 << 19):(3 << 19) + 4096]
        hits = []
        for dirpath, _, names in os.walk(c.node(k).mount.data):
            for name in names:
                path = os.path.join(dirpath, name)
                with open(path, "r+b") as f:
                    blob = f.read()
                    at = blob.find(probe)
                    if at >= 0:
                        f.seek(at + 100)
                        f.write(bytes([blob[at + 100] ^ 0x5A]))
                        hits.append(path)
        self.assertEqual(len(hits), 1, f"node {k}'s copy found in {hits}")

    def publish_on_1_and_2(self, c, rel, name, size):
        """Publishes chunk_bytes(name, size) as rel on node 1 of a 2-node R=2 cluster, held by
        both nodes; returns the bytes."""
        data = chunk_bytes(name, size)
        c.publish(1, rel, data)
        c.wait_exists(2, rel, VISIBLE_S)
        self.assertEqual(sorted(holder_ids(c.location(1, rel))), [1, 2])
        return data

    def assert_node_1_alone_reads(self, c, rel, name, size):
        """Reads rel on node 1 through a fresh mount (no page cache), with node 2 gone: its
        own copy alone."""
        c.stop(2)
        c.stop(1)
        c.restart(1)
        self.assert_read_ok_bounded(c, 1, rel, name, size)

    def test_corrupt_remote_copy_never_reaches_the_reader(self):
        # The holder sends its stored segments unchecked, with their stored checksums, and the
        # reader checks them (one checksum end to end). A copy that went bad on the holder's
        # disk must still never give the reader a wrong byte: the reader's check fails, it asks
        # again with the holder checking, the holder finds the damage and drops its copy, and
        # the read fails with EIO. R=1: the only copy is gone, and so is the file everywhere.
        c = self.cluster(n=2, replicas=1)
        size = 3 * (1 << 20) + 5
        data = chunk_bytes("remote-bitrot", size)
        self.publish_remote_to_2(c, "rb", data)
        c.stop(1)
        self.flip_stored_byte(c, 1, data)
        c.restart(1)
        c.wait_state(2, 1, "up", DOWN_S)
        r = c.read_in_subprocess(2, "rb", timeout=READ_BOUND_S + 20)
        self.assertFalse(r["timed_out"], "read of a corrupt remote copy hung")
        self.assertFalse(r["ok"], "a corrupt remote copy was read without an error")
        self.assertEqual(r["errno"], errno.EIO)
        self.assertIn("digest mismatch", c.log(2))
        wait_until(lambda: "is gone (corrupt)" in c.log(1), REPAIR_S, 0.1,
                   what="node 1 drops its corrupt copy")
        with open(c.path(1, ".kvfs/status")) as f:
            self.assertGreaterEqual(json.load(f)["checksum_failures"], 1)
        c.wait_gone(2, "rb", VISIBLE_S)

    def test_a_copy_found_corrupt_while_etcd_is_down_leaves_its_list_once_etcd_is_back(self):
        # A node that loses a copy leaves the chunk's holder list in etcd. With etcd down, that
        # failed and was not tried again: the node stayed listed for a copy it did not have
        # (no repair: the list showed R copies) until the file's record changed.
        c = self.cluster(n=2, replicas=2)
        size = 2 * (1 << 20) + 3
        data = self.publish_on_1_and_2(c, "bo", "bitrot-offline", size)
        # Flipped under the running node (a restart would drop it from the list first: a clean
        # stop ends its lease, and repair trims the list), with the kernel's cached pages of
        # the file dropped, so that the read reaches the device.
        self.flip_stored_byte(c, 1, data)
        fd = os.open(c.path(1, "bo"), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        c.etcd.kill9()
        try:
            # Read from node 2's copy, node 1's found corrupt and dropped; etcd is not there to
            # take node 1 off the list.
            self.assert_read_ok_bounded(c, 1, "bo", "bitrot-offline", size)
            wait_until(lambda: "is gone (corrupt)" in c.log(1), REPAIR_S, 0.1,
                       what="node 1 drops its corrupt copy")
            time.sleep(1)  # the housekeeping's tick, in which a leave would have been tried
            loc = c.location(1, "bo")
            self.assertEqual((sorted(holder_ids(loc)), loc["local"]), ([1, 2], False),
                             "node 1 left the list without etcd")
        finally:
            c.etcd.start()
        wait_until(lambda: "on a later try" in c.log(1), REPAIR_S, 0.2,
                   what="node 1 leaves the holder list once etcd is back")
        wait_until(lambda: c.location(1, "bo")["local"]
                   and sorted(holder_ids(c.location(2, "bo"))) == [1, 2],
                   REPAIR_S, 0.2, what="node 2 repaired node 1's copy")
        self.assert_node_1_alone_reads(c, "bo", "bitrot-offline", size)

    def test_corrupt_local_copy_is_read_from_the_other_replica_and_repaired(self):
        c = self.cluster(n=2, replicas=2)
        size = 3 * (1 << 20) + 5
        data = self.publish_on_1_and_2(c, "bitrot", "bitrot", size)
        c.stop(1)
        self.flip_stored_byte(c, 1, data)
        c.restart(1)
        # Node 1 reads its own copy first, finds the bad bytes, and finishes the read from node
        # 2's copy: the application never sees EIO nor a wrong byte.
        self.assert_read_ok_bounded(c, 1, "bitrot", "bitrot", size)
        with open(c.path(1, ".kvfs/status")) as f:
            status = json.load(f)
        self.assertGreaterEqual(status["checksum_failures"], 1, status)
        # The bad copy leaves the holder list (node 1 logs it once it no longer holds the
        # chunk) and node 2, the one good holder, repairs: node 1 holds a copy again, which
        # after that log line can only be a fresh one.
        wait_until(lambda: "is gone (corrupt)" in c.log(1), REPAIR_S, 0.1,
                   what="node 1 drops its corrupt copy")
        wait_until(lambda: c.nodes_json(2)["repair"]["repaired_chunks"] >= 1
                   and c.location(1, "bitrot")["local"]
                   and sorted(holder_ids(c.location(2, "bitrot"))) == [1, 2],
                   REPAIR_S, 0.2, what="node 2 repaired node 1's copy")
        self.assert_node_1_alone_reads(c, "bitrot", "bitrot", size)  # the repaired copy
