"""Nodes catching up with etcd, through real mounts: a watch that fell behind compaction, the
history compaction of the lowest live node and its holds, late joiners (also over a namespace
longer than the history kept), foreign keys under the prefix, ports taken, a drained node.

Every test starts its own etcd and nodes and stops them by PID at the end."""

import base64
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import unittest
import urllib.error

from cluster_etcd_case import ClusterEtcdCase, VISIBLE_S, DOWN_S, seed_bin, count_names
from kvfs_cluster import KvfsCluster, wait_until
from kvfs_testlib import KvfsError, chunk_bytes, write_file_atomic, freeze
from test_cluster_mount import REPAIR_S, holder_ids


class CatchUp(ClusterEtcdCase):
    def test_watch_behind_compaction_resyncs(self):
        c = self.cluster(n=2, replicas=1)
        os.mkdir(c.path(1, "c"))
        for i in range(5):
            self.write(c, 1, f"c/old{i}", b"o%d" % i)
        c.wait_exists(2, "c/old4", VISIBLE_S)
        pid = c.node(2).pid
        freeze(pid)
        try:
            # Node 2's watch stream breaks while it is frozen (an etcd restart), so nothing
            # of what follows is on its way to it: it must come back from the revision it had
            # applied, which compaction then takes away.
            c.etcd.kill9()
            c.etcd.start()

            self.write_when_accepted(c, 1, "c/new0", b"n0",
                                      "node 1 accepts changes after etcd restarted")
            for i in range(1, 5):
                self.write(c, 1, f"c/new{i}", b"n%d" % i)
            for i in range(3):
                os.unlink(c.path(1, f"c/old{i}"))
            self.write(c, 1, "c/old4", b"rewritten")
            c.etcd.compact()
        finally:
            os.kill(pid, signal.SIGCONT)
        want = sorted([f"new{i}" for i in range(5)] + ["old3", "old4"])
        wait_until(lambda: sorted(os.listdir(c.path(2, "c"))) == want, 15.0, 0.2,
                   what="node 2's listing after the re-read")
        self.assertEqual(self.read(c, 2, "c/old4"), b"rewritten")
        self.assertEqual(self.read(c, 2, "c/new3"), b"n3")
        self.assertRegex(c.log(2), r"(?i)compact|re-read")

    def test_the_lowest_live_node_compacts_etcd_history(self):
        # Every change is an etcd revision and etcd keeps every old version until compacted:
        # without it etcd's database grew by about 830 bytes per publish (4,000 publishes over
        # 200 names: 3.3 MB; with 2 s of history kept: 0.9 MB) until its quota refuses every
        # write. Here 1 s is kept: node 1, the lowest id, compacts as the publishes go on;
        # node 3, frozen longer than that, catches up (from its watch, which etcd kept, or by
        # reading the namespace again); once node 1 is gone, node 2 compacts.
        c = self.cluster(n=3, replicas=1, extra_args=["--etcd-history", "1"])
        os.mkdir(c.path(1, "h"))
        c.wait_exists(3, "h", VISIBLE_S)
        # Compaction holds kvfs did not write (no lease, or no node id) hold nothing: they would
        # never go away.
        for key in (b"/kvfs/s/00002", b"/kvfs/s/junk"):
            c.etcd.call("/v3/kv/put", {"key": base64.b64encode(key).decode(), "value": ""})

        def compacted(revision):
            body = {"key": base64.b64encode(b"/").decode(), "revision": revision}
            try:
                c.etcd.call("/v3/kv/range", body)
                return False
            except urllib.error.HTTPError as e:
                return b"compacted" in e.read()

        pid3 = c.node(3).pid
        freeze(pid3)
        try:
            n, start, mid = 0, time.monotonic(), None
            while time.monotonic() < start + 5:
                write_file_atomic(c.path(1, f"h/f{n % 20}"), b"v%d" % n)
                n += 1
                if mid is None and time.monotonic() > start + 2:
                    mid = c.etcd.revision()  # history from here on is compacted soon after
            wait_until(lambda: compacted(mid), 10, 0.2, what=f"etcd compacted past {mid}")
        finally:
            os.kill(pid3, signal.SIGCONT)
        # Every name and every last version (the names alone were all there before it froze).
        want = {name: self.read(c, 1, "h/" + name) for name in os.listdir(c.path(1, "h"))}
        self.assertEqual(len(want), 20)
        self.assertEqual(want[f"f{(n - 1) % 20}"], b"v%d" % (n - 1))

        def caught_up():
            # Until then node 3 goes through the states it missed, temp names included: a name
            # listed may be gone by the time it is opened.
            try:
                return {name: self.read(c, 3, "h/" + name)
                        for name in os.listdir(c.path(3, "h"))} == want
            except OSError:
                return False
        wait_until(caught_up, 15, 0.2,
                   what="node 3 shows the last version of every name after the freeze")
        self.assertIn("compacted etcd's history", c.log(1))
        nodes = c.nodes_json(1)  # what kvfsctl nodes shows
        self.assertEqual(nodes["etcd_history_s"], 1)
        self.assertGreaterEqual(nodes["compacted_revision"], mid)
        self.assertEqual(c.nodes_json(3)["compacted_revision"], 0)
        self.assertIn("this node compacted it to revision",
                      c.kvfsctl("nodes", c.node(1).mnt).stdout)

        c.stop(1)
        after = c.etcd.revision()
        for i in range(40):
            write_file_atomic(c.path(2, f"h/f{i % 20}"), b"w%d" % i)
            time.sleep(0.05)
        wait_until(lambda: compacted(after), 10, 0.2, what="node 2 compacts once node 1 left")
        self.assertIn("compacted etcd's history", c.log(2))
        self.assertNotIn("compacted etcd's history", c.log(3))  # never the lowest live node

    def test_a_compaction_hold_stops_compaction_until_its_lease_goes(self):
        # What a node reading the whole namespace puts (s/<node> under its lease), put here by
        # hand: node 1 compacts up to its revision and no further, kvfsctl nodes says why, and
        # once the lease is gone (the reading node died) compaction goes on.
        c = self.cluster(n=1, replicas=1, extra_args=["--etcd-history", "1"])
        lease = c.etcd.call("/v3/lease/grant", {"TTL": 60})["ID"]
        put = c.etcd.call("/v3/kv/put", {"key": base64.b64encode(b"/kvfs/s/00002").decode(),
                                          "value": "", "lease": lease})
        hold = int(put["header"]["revision"])
        with self.publishing(c):
            wait_until(lambda: c.nodes_json(1)["compacted_revision"] == hold, 15, 0.2,
                       what=f"node 1 compacts up to the hold at {hold}")
            time.sleep(2.5)  # two more chances to compact past it
            nodes = c.nodes_json(1)
            self.assertEqual(nodes["compacted_revision"], hold)
            self.assertEqual(nodes["compaction_held"], {"revision": hold, "by_node": 2})
            self.assertGreater(c.etcd.revision(), hold + 50)
            self.assertIn(f"compaction held at revision {hold} while node 2 reads",
                          c.kvfsctl("nodes", c.node(1).mnt).stdout)
            c.etcd.call("/v3/lease/revoke", {"ID": lease})
            wait_until(lambda: c.nodes_json(1)["compacted_revision"] > hold, 15, 0.2,
                       what="node 1 compacts past the hold once its lease is gone")
            self.assertEqual(c.nodes_json(1)["compaction_held"]["revision"], 0)

    def seeded_cluster(self, count, replicas=1):
        """Node 1 alone with 1 s of etcd history over `count` names seeded straight into etcd
        (seed/), once it has taken them all in (node 1 compacts to what it has applied)."""
        if not os.access(seed_bin(), os.X_OK):
            self.skipTest(f"{seed_bin()} not built (KVFS_BUILD_BENCH=OFF)")
        c = self.cluster(n=2, replicas=replicas, start_nodes=[1],
                         extra_args=["--etcd-history", "1"])
        seeded = subprocess.run([seed_bin(), "--etcd", c.etcd.endpoint, "--dir", "seed",
                                 "--count", str(count)], capture_output=True, text=True,
                                timeout=600)
        self.assertEqual(seeded.returncode, 0, seeded.stderr)
        wait_until(lambda: os.path.isdir(c.path(1, "seed")) and
                   count_names(c.path(1, "seed")) == count, 60, 0.5, what="node 1 has the names")
        return c

    @staticmethod
    def start_in_thread(c, k):
        """Starts node k on a thread of its own (a start waits for the node's whole read);
        returns the thread and a list that gets None, or the exception, when it ends."""
        started = []

        def start():
            try:
                c.start_node(k)
                started.append(None)
            except Exception as e:  # reported by the test thread
                started.append(e)
        thread = threading.Thread(target=start)
        thread.start()
        return thread, started

    @staticmethod
    def hold_of_node_2(c) -> bool:
        """Whether node 2's compaction hold (a key under its lease) is in etcd."""
        return "kvs" in c.etcd.call("/v3/kv/range", {
            "key": base64.b64encode(b"/kvfs/s/00002").decode()})

    @contextlib.contextmanager
    def publishing(self, c):
        """Node 1 rewrites 20 files in h/ all along: new revisions for compaction to pass."""
        os.mkdir(c.path(1, "h"))
        stop = threading.Event()

        def publish():
            i = 0
            while not stop.is_set():
                write_file_atomic(c.path(1, f"h/f{i % 20}"), b"v%d" % i)
                i += 1

        publisher = threading.Thread(target=publish)
        publisher.start()
        try:
            yield
        finally:
            stop.set()
            publisher.join()

    def test_a_late_joiner_reads_a_namespace_longer_than_the_history_kept(self):
        # A node reads the whole namespace at one revision when it starts (and when its watch
        # fell behind compaction). With 1 s of history kept and node 1 publishing all along,
        # that revision is compacted away long before a read of 150,000 names ends: the read
        # failed midway (ESTALE) and every retry met the same fate. Now a reading node holds
        # compaction at its revision (a key under its lease) until its read is done. Through
        # etcd's gRPC API the read of 150,000 names takes under a second, less than the history
        # kept, so node 2 is frozen in its read for 1.5 s (less than its 3 s lease): long
        # enough for node 1's compaction, once a second, to meet the hold.
        count = 150000
        c = self.seeded_cluster(count)
        seeded_to = c.etcd.revision()

        with self.publishing(c):
            # Node 1 compacts about once a second, to what etcd held a second before.
            wait_until(lambda: c.nodes_json(1)["compacted_revision"] > seeded_to, 60, 0.2,
                       what="node 1 compacts past the seeded names")
            c.node(2).mount.mount_timeout_s = 90  # it reads 150,000 names before it mounts
            starter, started = self.start_in_thread(c, 2)
            wait_until(lambda: self.hold_of_node_2(c), 60, 0.01,
                       what="node 2 holds compaction for its read")
            pid = c.node(2).pid
            freeze(pid)
            try:
                self.assertTrue(starter.is_alive(), "node 2 finished its read before the freeze")
                time.sleep(1.5)
            finally:
                os.kill(pid, signal.SIGCONT)
            starter.join(120)
            self.assertEqual(started, [None], c.log(2)[-3000:])
            self.assertEqual(count_names(c.path(2, "seed")), count)
            held = re.search(r"compaction held at revision (\d+) while node 2 reads",
                             c.log(1))
            self.assertIsNotNone(held, "node 1 never held compaction for node 2's read")
            # The read over, the hold goes: compaction passes it again.
            wait_until(lambda: c.nodes_json(1)["compacted_revision"] > int(held.group(1)), 20,
                       0.2, what="node 1 compacts past the released hold")
        self.assertRegex(c.log(2), r"loaded 1500\d\d namespace records")
        # Its watch began where the read ended: no second read of everything.
        self.assertNotIn("namespace re-read", c.log(2))
        holds = c.etcd.call("/v3/kv/range", {
            "key": base64.b64encode(b"/kvfs/s/").decode(),
            "range_end": base64.b64encode(b"/kvfs/s0").decode()})
        self.assertNotIn("kvs", holds)

    def test_a_joiner_frozen_in_its_read_past_its_lease_reads_the_namespace_again(self):
        # A joining node's compaction hold lives under its lease. Frozen (SIGSTOP) in the middle
        # of its read past that lease, it loses the hold, node 1 compacts past the read's
        # revision, and the read's next page is refused once it runs again (or the request in
        # flight timed out meanwhile). Before, the daemon exited ("cannot load: ..."); now it
        # reads the namespace again from the start (under a new hold, once it registered
        # again) and joins with every name.
        count = 150000
        c = self.seeded_cluster(count)

        def hold_of_node_2():
            return self.hold_of_node_2(c)


        c.node(2).mount.mount_timeout_s = 120  # the frozen seconds and two reads, on 2 cores
        with self.publishing(c):
            starter, started = self.start_in_thread(c, 2)
            wait_until(hold_of_node_2, 60, 0.01, what="node 2 holds compaction for its read")
            pid = c.node(2).pid
            freeze(pid)
            try:
                self.assertTrue(starter.is_alive(), "node 2 finished its read before the freeze")
                # The read's revision is at most etcd's now. The hold goes with node 2's 3 s
                # lease; then node 1 compacts past that revision.
                read_at_most = c.etcd.revision()
                wait_until(lambda: c.nodes_json(1)["compacted_revision"] > read_at_most, 30,
                           0.2, what="node 1 compacts past node 2's read")
                self.assertFalse(hold_of_node_2(), "the hold outlived node 2's lease")
            finally:
                os.kill(pid, signal.SIGCONT)
            starter.join(150)
        self.assertEqual(started, [None], c.log(2)[-3000:])
        # Its next page was refused (compacted), or the request in flight when it froze had
        # timed out by the time it ran again: either way the read is done again.
        self.assertRegex(c.log(2), r"reading the namespace failed \(.*\); reading it again")
        self.assertRegex(c.log(2), r"loaded 1500\d\d namespace records")
        self.assertEqual(count_names(c.path(2, "seed")), count)
        wait_until(lambda: not hold_of_node_2(), 20, 0.2, what="node 2 releases its hold")

    def test_copies_placed_on_a_joiner_during_its_read_are_kept(self):
        # A node takes copies from the moment it registers, which is before it has read the
        # namespace (at one revision). The record naming such a copy commits after that
        # revision, so only the watch brings it, after the read. The read's end dropped every
        # held chunk that no record of the read named, these too: node 2 stayed listed as a
        # holder of copies it no longer had (one copy where R=2 was promised), and once node 1
        # died those files read EIO.
        c = self.seeded_cluster(150000, replicas=2)
        os.mkdir(c.path(1, "p"))
        published = {}
        during_read = []
        stop = threading.Event()

        def publish():
            i = 0
            while not stop.is_set():
                rel = f"p/f{i}"
                data = chunk_bytes(rel, 4096 + i)
                write_file_atomic(c.path(1, rel), data)
                published[rel] = data
                if self.hold_of_node_2(c):
                    during_read.append(rel)
                i += 1

        c.node(2).mount.mount_timeout_s = 90  # it reads 150,000 names before it mounts
        publisher = threading.Thread(target=publish)
        try:
            starter, started = self.start_in_thread(c, 2)
            wait_until(lambda: self.hold_of_node_2(c), 60, 0.01,
                       what="node 2 holds compaction for its read")
            publisher.start()
            starter.join(120)
        finally:
            stop.set()
            if publisher.ident is not None:
                publisher.join()
        self.assertEqual(started, [None], c.log(2)[-3000:])
        self.assertTrue(during_read, "no publish landed while node 2 read the namespace")
        # Not dropped and made again by repair (a record naming a node without the copy makes
        # that node leave the list): never dropped.
        self.assertNotRegex(c.log(2), r"dropped [1-9]\d* copies no record needs")
        wait_until(lambda: len(os.listdir(c.path(2, "p"))) == len(published), VISIBLE_S, 0.1,
                   what="node 2 lists every published file")
        # A dropped copy is still served for 5 s (ClusterStore::kRetireGrace): past that.
        time.sleep(7)
        on_node_2 = [rel for rel in published if 2 in holder_ids(c.location(1, rel))]
        self.assertTrue(set(during_read) & set(on_node_2),
                        "no copy was placed on node 2 during its read")
        missing = [rel for rel in on_node_2 if not c.location(2, rel)["local"]]
        self.assertEqual(missing, [], f"listed as held by node 2 but not there, of "
                         f"{len(on_node_2)}; {len(during_read)} published during its read")
        # What R=2 promises: node 1 gone, node 2 still reads every file it holds.
        c.kill9(1)
        for rel in on_node_2:
            self.assertEqual(self.read(c, 2, rel), published[rel], rel)

    def test_a_holder_list_naming_a_node_without_the_copy_is_mended(self):
        # etcd restored from a backup, or a copy lost between its PUT and its record's commit:
        # a record lists a node that does not have the chunk. That node must leave the list,
        # so that repair makes the missing copy; before, it counted as a copy and the file had
        # one where R=2 was promised. Here etcd's record of a file held by nodes 1 and 3 is
        # rewritten (as a restore would) to name nodes 1 and 2.
        c = self.cluster(n=3, replicas=2)
        data = {}
        target = None
        for i in range(40):
            rel = f"m{i}"
            data[rel] = chunk_bytes(rel, 200_000 + i)
            c.publish(1, rel, data[rel])
            if holder_ids(c.location(1, rel)) == [1, 3]:
                target = rel
                break
        self.assertIsNotNone(target, "no file of 40 was placed on nodes 1 and 3")
        for k in (2, 3):
            c.wait_exists(k, target, VISIBLE_S)
        ino = os.stat(c.path(1, target)).st_ino
        [(key, value)] = c.etcd.range_prefix(f"/kvfs/i/{ino:016x}")
        # engine/cluster/record_value.cc: format 2 (no xattrs) ends with the holder count (u8)
        # and the holder ids (u16 each, little-endian).
        self.assertEqual(value[0], 2)
        self.assertEqual(value[-5:], bytes([2, 1, 0, 3, 0]))
        restored = value[:-4] + bytes([1, 0, 2, 0])
        c.etcd.call("/v3/kv/put", {"key": base64.b64encode(key.encode()).decode(),
                                   "value": base64.b64encode(restored).decode()})

        def holders_hold():
            ids = holder_ids(c.location(1, target))
            return len(ids) == 2 and all(c.location(k, target)["local"] for k in ids)
        # Node 2 leaves the list, node 3 drops the copy it is no longer listed for, and repair
        # makes a second copy (on node 2 or 3: a fresh one either way).
        wait_until(lambda: "which it does not have: leaving the list" in c.log(2), VISIBLE_S,
                   0.1, what="node 2 leaves a holder list it is wrongly on")
        wait_until(holders_hold, REPAIR_S, 0.2,
                   what=f"two holders that hold {target} ({c.location(1, target)})")
        # What R=2 promises: node 1 gone, the other holder still reads the file.
        (other,) = [k for k in holder_ids(c.location(1, target)) if k != 1]
        c.kill9(1)
        self.assertEqual(self.read(c, other, target), data[target])

    def test_a_node_back_after_repair_drops_the_copies_it_was_replaced_for(self):
        # A node killed past its lease comes back to holder lists that repair rewrote without
        # it (its chunks copied to the others). Its copies of those chunks are surplus. Before,
        # its read at start kept every copy that some record named, listed or not, and nothing
        # dropped them later but eviction: space lost each time a node came back.
        c = self.cluster(n=3, replicas=2)
        os.mkdir(c.path(1, "r"))
        files = {f"r/f{i}": chunk_bytes(f"r{i}", 100_000 + i) for i in range(12)}
        for rel, data in files.items():
            c.publish(1, rel, data)
        on_node_2 = [rel for rel in files if 2 in holder_ids(c.location(1, rel))]
        self.assertTrue(on_node_2, "no chunk has a copy on node 2: the test would test nothing")
        for rel in on_node_2:
            c.wait_exists(2, rel, VISIBLE_S)
            self.assertTrue(c.location(2, rel)["local"], rel)

        c.kill9(2)
        c.wait_state(1, 2, "down", DOWN_S)
        wait_until(lambda: all(sorted(holder_ids(c.location(1, rel))) == [1, 3]
                               for rel in on_node_2), REPAIR_S, 0.2,
                   what="repair copies node 2's chunks to node 3")
        c.restart(2)
        c.wait_state(1, 2, "up", DOWN_S)
        # A dropped copy is still served for 5 s (ClusterStore::kRetireGrace): past that.
        time.sleep(7)
        kept = [rel for rel in on_node_2 if c.location(2, rel)["local"]]
        self.assertEqual(kept, [], f"node 2 kept copies no holder list names, of "
                         f"{len(on_node_2)}")
        for rel in on_node_2:
            self.assertEqual(self.read(c, 2, rel), files[rel], rel)
            self.assertEqual(sorted(holder_ids(c.location(2, rel))), [1, 3], rel)

    def test_late_joiner_sees_everything(self):
        c = self.cluster(n=3, replicas=2, start_nodes=[1, 2])
        want = {}
        for d in range(4):
            os.mkdir(c.path(1 + d % 2, f"l{d}"))
            for i in range(25):
                rel = f"l{d}/f{i}"
                want[rel] = chunk_bytes(rel, 1000 + i)
                self.write(c, 1 + d % 2, rel, want[rel])
        os.unlink(c.path(1, "l0/f0"))
        del want["l0/f0"]
        c.start_node(3)
        for d in range(4):
            self.assertEqual(sorted(os.listdir(c.path(3, f"l{d}"))),
                             sorted(os.path.basename(r) for r in want if r.startswith(f"l{d}/")))
        for rel, data in list(want.items())[::7]:
            self.assertEqual(self.read(c, 3, rel), data, rel)

    def test_foreign_keys_under_the_prefix_neither_crash_nor_lock_out(self):
        # Keys kvfs did not write (by hand, a broken tool, a hostile client): garbage records
        # and names, and member keys without a lease. None may crash a node, show up as a
        # member (a key without a lease never expires), or keep a node id from joining.
        c = self.cluster(n=2, replicas=2)
        c.publish(1, "a", chunk_bytes("a", 300_000))
        c.wait_exists(2, "a", VISIBLE_S)

        def put(key, value):
            b64 = lambda v: base64.b64encode(v).decode()
            c.etcd.call("/v3/kv/put", {"key": b64(b"/kvfs/" + key), "value": b64(value)})

        ghost = json.dumps({"address": "127.0.0.9:1", "capacity": 1 << 30, "used": 0})
        put(b"m/00007", ghost.encode())  # a well-formed registration, but no lease
        put(b"m/00003", b"\x00\xffnot json")
        put(b"i/0001000000000099", b"\x01garbage")
        put(b"i/zz", b"x" * 5000)
        put(b"d/0000000000000001/evil", b"0001000000000099")
        put(b"d/zz/x", b"")
        c.publish(1, "b", chunk_bytes("b", 1000))
        c.wait_exists(2, "b", VISIBLE_S)
        for k in (1, 2):
            self.assertTrue(c.node(k).running(), f"node {k} died\n{c.logs_tail()}")
            self.assertEqual(sorted(c.node_states(k)), [1, 2], f"node {k}'s members")
            self.assertEqual(sorted(os.listdir(c.path(k))), ["a", "b"])

        # Node 2 stops; its id's key is then overwritten by something with no lease.
        c.stop(2)
        put(b"m/00002", ghost.encode())
        time.sleep(1)  # the put's watch event has reached node 1
        self.assertEqual(c.node_states(1).get(2), "down", "a lease-less key counted as node 2")
        self.assertNotIn("127.0.0.9", json.dumps(c.nodes_json(1)))
        c.start_node(2)  # was refused: "node id 2 is registered by a live node"
        c.wait_state(1, 2, "up", DOWN_S)
        self.assertIn(c.nodes[2].address, json.dumps(c.nodes_json(1)))
        self.assertEqual(self.read(c, 2, "a"), chunk_bytes("a", 300_000))
        c.publish(2, "c", chunk_bytes("c", 2000))
        c.wait_exists(1, "c", VISIBLE_S)
        self.assertEqual(self.read(c, 1, "c"), chunk_bytes("c", 2000))

    def test_leased_registrations_with_bad_addresses_neither_crash_nor_take_copies(self):
        # Registrations under a live lease that no real node wrote: an address that does not
        # parse (it once killed every node: std::stoul threw in the publish path), a wildcard
        # (peers would dial themselves), and another node's address (two nodes advertising one
        # address, or a registration that outlived its node while another took its port).
        c = self.cluster(n=2, replicas=2)
        lease = c.etcd.call("/v3/lease/grant", {"TTL": 120})["ID"]
        b64 = lambda v: base64.b64encode(v).decode()

        def register(node_id, address):
            value = json.dumps({"address": address, "capacity": 1 << 30, "used": 0})
            c.etcd.call("/v3/kv/put", {"key": b64(b"/kvfs/m/%05d" % node_id),
                                       "value": b64(value.encode()), "lease": lease})

        register(7, "127.0.0.1:notaport")
        register(8, f"0.0.0.0:{c.node(2).port}")
        register(9, c.node(2).address)  # node 2 answers there, as node 2
        wait_until(lambda: 9 in c.node_states(1) and 9 in c.node_states(2), VISIBLE_S,
                   what="node 9's registration seen")
        for k in (1, 2):
            self.assertEqual(sorted(c.node_states(k)), [1, 2, 9], f"node {k}'s members")
        # A node pings each member that joins: node 9 is named before any request went to it.
        def names_node_9(k):
            err = c.kvfsctl("nodes", c.path(k)).stderr
            return "node 9 is up in etcd but this node cannot reach it" in err and \
                "answers as node2" in err
        for k in (1, 2):
            wait_until(lambda: names_node_9(k), VISIBLE_S,
                       what=f"node {k} names node 9 before any publish")
        files = {f"bad/f{i}": chunk_bytes(f"bad{i}", 50_000 + i) for i in range(12)}
        os.mkdir(c.path(1, "bad"))
        for rel, data in files.items():
            c.publish(1, rel, data)
        for rel, data in files.items():
            c.wait_exists(2, rel, VISIBLE_S)
            # The rendezvous ranking puts node 9 ahead of node 2 for about half the chunks.
            # Its PUTs reach node 2, which names itself: they must fail there and move on,
            # not leave node 9 on the holder list of a copy node 2 has.
            holders = sorted(h["id"] for h in c.location(1, rel)["holders"])
            self.assertEqual(holders, [1, 2], rel)
            self.assertEqual(self.read(c, 2, rel), data, rel)
        for k in (1, 2):
            self.assertTrue(c.node(k).running(), f"node {k} died\n{c.logs_tail()}")
        self.assertIn("not a kvfs node's", c.log(1))
        # kvfsctl nodes names node 9, which this node cannot reach as itself.
        self.assertGreater(
            [n for n in c.nodes_json(1)["nodes"] if n["id"] == 9][0]["failures"], 0)
        wait_until(lambda: "answers as node2" in c.kvfsctl("nodes", c.path(1)).stderr,
                   VISIBLE_S, what="kvfsctl nodes says node 9's address answers as node 2")
        r = c.kvfsctl("nodes", c.path(1))
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("node 9 is up in etcd but this node cannot reach it", r.stderr)
        c.etcd.call("/v3/lease/revoke", {"ID": lease})
        c.wait_state(1, 9, "down", DOWN_S)

    def test_a_node_whose_advertised_address_reaches_another_node_is_refused(self):
        # --advertise naming another node's address (a config file copied between hosts):
        # peers would send this node's copies to the other one, which refuses them as not its
        # own, and this node would hold nothing. Its start is refused. An address where
        # nothing answers is only logged: another host may reach what this one cannot.
        c = self.cluster(n=2, replicas=1, start_nodes=[1])
        c.node_args[2] = ["--advertise", c.node(1).address]
        with self.assertRaises(KvfsError) as e:
            c.start_node(2)
        self.assertIn(f"{c.node(1).address}, reaches another kvfs node", str(e.exception))
        self.assertIn("answers as node1, not node2", str(e.exception))
        self.assertNotIn(2, c.node_states(1))
        # Another service at the address (here one that answers garbage and hangs up).
        other = socket.socket()
        other.bind(("127.0.0.1", 0))
        other.listen()
        self.addCleanup(other.close)

        def answer_garbage():
            with contextlib.suppress(OSError):
                while True:
                    conn, _ = other.accept()
                    with conn:
                        conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" + bytes(range(256)))

        threading.Thread(target=answer_garbage, daemon=True).start()
        c.node_args[2] = ["--advertise", f"127.0.0.1:{other.getsockname()[1]}"]
        with self.assertRaises(KvfsError) as e:
            c.start_node(2)
        self.assertIn("reaches something that is not a kvfs node", str(e.exception))
        self.assertNotIn(2, c.node_states(1))
        silent = socket.socket()  # a port nothing listens at
        silent.bind(("127.0.0.1", 0))
        self.addCleanup(silent.close)
        c.node_args[2] = ["--advertise", f"127.0.0.1:{silent.getsockname()[1]}"]
        c.start_node(2)
        c.wait_state(1, 2, "up", VISIBLE_S)
        self.assertIn("does not reach itself at the address it registers", c.log(2))

    def test_a_live_registration_this_node_cannot_reach_is_named_until_it_answers(self):
        # A node whose lease lives but which this node cannot talk to: its daemon killed
        # before its lease ran out, then restarted with another secret. kvfsctl nodes exited
        # 0 and named neither; only its FAILED count grew, with every copy meant for it.
        c = self.cluster(n=2, replicas=2, lease_ttl_s=60)
        os.mkdir(c.path(1, "u"))
        c.wait_exists(2, "u", VISIBLE_S)

        def unreachable():
            return [n for n in c.nodes_json(1)["nodes"] if n["id"] == 2][0]["unreachable"]

        def named(why):
            r = c.kvfsctl("nodes", c.path(1))
            return (r.returncode == 1 and why in unreachable() and
                    "node 2 is up in etcd but this node cannot reach it" in r.stderr)

        self.assertEqual(c.kvfsctl("nodes", c.path(1)).returncode, 0)
        self.assertEqual(unreachable(), "")
        c.kill9(2)
        files = {f"u/f{i}": chunk_bytes(f"unreach{i}", 80_000 + i) for i in range(3)}
        for rel, data in files.items():
            c.publish(1, rel, data)  # its PUT to node 2 is refused; node 1 keeps the copy
        self.assertEqual(c.node_states(1)[2], "up")  # its lease lives on
        wait_until(lambda: named("refused"), VISIBLE_S,
                   what=f"kvfsctl nodes names node 2, whose daemon is gone ({unreachable()!r})")
        # Named, it gets no more PUTs until a ping finds it (before, every publish tried it,
        # was refused and logged it, until its lease ended).
        puts = [n for n in c.nodes_json(1)["nodes"] if n["id"] == 2][0]["puts_sent"]
        for i in range(3, 6):
            rel = f"u/f{i}"
            files[rel] = chunk_bytes(f"unreach{i}", 80_000 + i)
            c.publish(1, rel, files[rel])
            self.assertEqual([h["id"] for h in c.location(1, rel)["holders"]], [1])
        self.assertEqual([n for n in c.nodes_json(1)["nodes"] if n["id"] == 2][0]["puts_sent"],
                         puts, "a PUT went to node 2 after its ping had failed")

        c.set_secret(2, b"not the cluster's secret")
        c.restart(2)
        wait_until(lambda: named("secret"), VISIBLE_S,
                   what=f"kvfsctl nodes names node 2, which has another secret "
                   f"({unreachable()!r})")

        c.stop(2)
        c.set_secret(2, None)
        c.restart(2)
        wait_until(lambda: c.kvfsctl("nodes", c.path(1)).returncode == 0 and unreachable() == "",
                   VISIBLE_S, what=f"node 2 answers again ({unreachable()!r})")
        for rel, data in files.items():  # repair gave node 2 its copies
            wait_until(lambda: sorted(h["id"] for h in c.location(1, rel)["holders"]) == [1, 2],
                       30, what=f"{rel} has its second copy")
            self.assertEqual(self.read(c, 2, rel), data, rel)

    def test_ports_taken_before_the_first_start_move_etcd_and_the_node(self):
        # The harness picks free ports, then starts etcd and the daemons on them; another test
        # (or any process) can take one in between. CI once failed that way ("bind: address
        # already in use"). A first start moves to new ports; a restart keeps its ports.
        c = KvfsCluster(n=2, replicas=1)
        self.addCleanup(c.cleanup)
        taken = []
        for host, port in (("127.0.0.1", c.etcd.client_port), (c.node(1).host, c.node(1).port)):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.addCleanup(s.close)
            s.bind((host, port))
            s.listen()
            taken.append((host, port))
        c.start()
        self.assertNotEqual(c.etcd.client_port, taken[0][1])
        self.assertNotEqual(c.node(1).port, taken[1][1])
        data = chunk_bytes("ports", 300_000)
        c.publish(2, "p/a", data)
        c.wait_exists(1, "p/a", VISIBLE_S)
        self.assertEqual(self.read(c, 1, "p/a"), data)
        endpoint, address = c.etcd.endpoint, c.node(1).address
        c.etcd.kill9()
        c.etcd.start()
        c.stop(1)
        c.restart(1)
        self.assertEqual((c.etcd.endpoint, c.node(1).address), (endpoint, address))
        self.assertEqual(self.read(c, 1, "p/a"), data)

    def test_drain_moves_copies_off_a_node(self):
        c = self.cluster(n=3, replicas=2)
        os.mkdir(c.path(1, "dr"))
        for k in (2, 3):
            c.wait_exists(k, "dr", VISIBLE_S)
        files = {f"dr/f{i}": chunk_bytes(f"dr{i}", 20_000 + i) for i in range(6)}
        for rel, data in files.items():
            self.write(c, 1 + (int(rel[-1]) % 3), rel, data)
        for rel in files:
            c.wait_exists(3, rel, VISIBLE_S)
        r = c.kvfsctl("drain", c.path(3))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        wait_until(lambda: c.node_states(1).get(3) == "draining", 10.0, 0.2,
                   what="node 1 sees node 3 draining")

        def drained():
            return all(3 not in [h["id"] for h in c.location(1, rel)["holders"]] and
                       len(c.location(1, rel)["holders"]) == 2 for rel in files)
        wait_until(drained, 30.0, 0.3, what="no chunk keeps a copy on node 3")
        for rel, data in files.items():
            self.assertEqual(self.read(c, 1, rel), data)
        # new chunks do not go there either
        self.write(c, 1, "dr/new", b"z" * 50_000)
        c.wait_exists(2, "dr/new", VISIBLE_S)
        self.assertNotIn(3, [h["id"] for h in c.location(1, "dr/new")["holders"]])
        r = c.kvfsctl("undrain", c.path(1), "--node", "3")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        wait_until(lambda: c.node_states(1).get(3) == "up", 10.0, 0.2,
                   what="node 3 takes copies again")


if __name__ == "__main__":
    unittest.main()
