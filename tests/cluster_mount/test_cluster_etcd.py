"""The cluster's metadata on etcd, through real mounts (tests/pylib/kvfs_cluster.py starts one
etcd per test on loopback): O_EXCL across nodes, a frozen node catching up, etcd frozen (writes
refused with EROFS, reads go on, recovery by itself), etcd killed and restarted, a watch that
fell behind compaction, the history compaction of the lowest live node, a late joiner, a
drained node.

Every test starts its own etcd and nodes and stops them by PID at the end."""

import base64
import contextlib
import errno
import functools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest
import urllib.error

from kvfs_cluster import KvfsCluster, start_cluster, wait_until
from kvfs_relay import TcpRelay
from kvfs_testlib import (RENAME_NOREPLACE, chunk_bytes, default_kvfs_bin, rename_exchange,
                          renameat2, write_file_atomic)

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


class ClusterEtcd(unittest.TestCase):
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

    def test_o_excl_race_across_nodes_has_one_winner(self):
        c = self.cluster(n=3, replicas=2)
        os.mkdir(c.path(1, "x"))
        for k in (2, 3):
            c.wait_exists(k, "x", VISIBLE_S)
        for round_ in range(8):
            name = f"x/lock{round_}"

            def create(k, i):
                fd = os.open(c.path(k, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
                os.write(fd, f"node{k}-{i}".encode())
                os.close(fd)
            k, i = self.one_winner(name, create)
            for node in (1, 2, 3):
                wait_until(lambda: os.path.exists(c.path(node, name)) and
                           self.read(c, node, name) == f"node{k}-{i}".encode(), VISIBLE_S,
                           what=f"node {node} shows the winner's {name}")

    def test_rename_noreplace_race_across_nodes_has_one_winner(self):
        # Each of 6 writers on 3 nodes publishes its own temp file onto one name with
        # RENAME_NOREPLACE at once: exactly one rename takes the name, the others get EEXIST
        # and keep their temp files, and every node shows the winner's bytes.
        c = self.cluster(n=3, replicas=2)
        os.mkdir(c.path(1, "x"))
        for k in (2, 3):
            c.wait_exists(k, "x", VISIBLE_S)
        writers = [(k, i) for k in (1, 2, 3) for i in range(2)]
        for round_ in range(6):
            name = f"x/chunk{round_}"
            for k, i in writers:
                self.write(c, k, f"{name}.tmp{k}{i}", f"node{k}-{i}".encode())
            for k, i in writers:
                for node in (1, 2, 3):
                    c.wait_exists(node, f"{name}.tmp{k}{i}", VISIBLE_S)

            def publish(k, i):
                renameat2(c.path(k, f"{name}.tmp{k}{i}"), c.path(k, name), RENAME_NOREPLACE)
            k, i = self.one_winner(name, publish)
            left = sorted(f"chunk{round_}.tmp{a}{b}" for a, b in writers if (a, b) != (k, i))
            for node in (1, 2, 3):
                wait_until(lambda: os.path.exists(c.path(node, name)) and
                           self.read(c, node, name) == f"node{k}-{i}".encode() and
                           sorted(n for n in os.listdir(c.path(node, "x"))
                                  if n.startswith(f"chunk{round_}.")) == left, VISIBLE_S,
                           what=f"node {node} shows the winner's {name} and the losers' temps")

    def test_mkdir_and_rename_noreplace_across_nodes(self):
        c = self.cluster(n=2, replicas=1)
        os.mkdir(c.path(1, "d"))
        c.wait_exists(2, "d", VISIBLE_S)
        with self.assertRaises(FileExistsError):
            os.mkdir(c.path(2, "d"))
        self.write(c, 1, "d/a", b"first")
        c.wait_exists(2, "d/a", VISIBLE_S)
        # rmdir of a directory another node has just put a name into is refused
        with self.assertRaises(OSError) as e:
            os.rmdir(c.path(2, "d"))
        self.assertEqual(e.exception.errno, errno.ENOTEMPTY)
        # a rename onto a name published by another node replaces it everywhere
        self.write(c, 2, "d/b", b"second")
        os.rename(c.path(2, "d/b"), c.path(2, "d/a"))
        wait_until(lambda: self.read(c, 1, "d/a") == b"second", VISIBLE_S,
                   what="node 1 sees the rename over d/a")
        self.assertFalse(os.path.exists(c.path(1, "d/b")))

    def test_crossing_directory_moves_on_two_nodes_make_no_cycle(self):
        # Node 1 moves a into b (or into b/c) while node 2 moves b into a: each is fine on its
        # own node's tree; both together would cut a and b off the tree in a cycle.
        c = self.cluster(n=2, replicas=1)
        for r in range(6):
            a, b = f"a{r}", f"b{r}"
            into = f"{b}/c" if r % 2 else b
            os.makedirs(c.path(1, into))
            os.mkdir(c.path(1, a))
            self.write(c, 1, f"{a}/fa", b"in a")
            self.write(c, 1, f"{into}/fc", b"in c")
            c.wait_exists(2, f"{a}/fa", VISIBLE_S)
            c.wait_exists(2, f"{into}/fc", VISIBLE_S)
            barrier = threading.Barrier(2)
            results = {}

            def move(k, src, dst):
                barrier.wait()
                try:
                    os.rename(c.path(k, src), c.path(k, dst))
                    results[k] = 0
                except OSError as e:
                    results[k] = e.errno
            threads = [threading.Thread(target=move, args=(1, a, f"{into}/{a}")),
                       threading.Thread(target=move, args=(2, b, f"{a}/{b}"))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            # The second is refused (EINVAL: a move into itself), or, when the first reached
            # the other node before the kernel there resolved the destination's path, that
            # path is gone (ENOENT; 2 rounds of 36 with two busy loops beside the test).
            self.assertIn(sorted(results.values()), ([0, errno.EINVAL], [0, errno.ENOENT]),
                          f"round {r}")

            def files_of(k):
                # What a walk from the root finds of this round: a cycle is cut off from it.
                # None while the node still applies a move under the walk (a file it listed
                # has moved by the time it is read).
                found = {}
                try:
                    for top in (a, b):
                        for root, _, files in os.walk(c.path(k, top)):
                            for f in files:
                                rel = os.path.relpath(os.path.join(root, f), c.path(k))
                                found[rel] = self.read(c, k, rel)
                except FileNotFoundError:
                    return None
                return found
            want = ({f"{into}/{a}/fa": b"in a", f"{into}/fc": b"in c"} if results[1] == 0 else
                    {f"{a}/fa": b"in a", f"{a}/{into}/fc": b"in c"})
            for k in (1, 2):
                wait_until(lambda: files_of(k) == want, VISIBLE_S,
                           what=f"round {r}: node {k} shows {want}")

    def test_a_directory_whose_new_name_waits_on_a_local_file_keeps_its_entries(self):
        # Node 2 renames directories onto names node 1's writers hold open, not published yet:
        # node 1's view of each directory waits for its name (it leaves node 1's tree) until
        # that publish is refused and a reset gives it back. It came back empty, on node 1
        # only: an entry it had (x/f) and one made while it waited (x2/g) were cut off there.
        c = self.cluster(n=2, replicas=1)
        os.mkdir(c.path(2, "x"))
        self.write(c, 2, "x/f", b"before")
        os.mkdir(c.path(2, "x2"))
        c.wait_exists(1, "x/f", VISIBLE_S)
        c.wait_exists(1, "x2", VISIBLE_S)
        fds = []
        for name in ("y", "y2"):
            fds.append(os.open(c.path(1, name), os.O_WRONLY | os.O_CREAT, 0o644))
            os.write(fds[-1], b"local")
        os.rename(c.path(2, "x"), c.path(2, "y"))
        os.rename(c.path(2, "x2"), c.path(2, "y2"))
        self.write(c, 2, "y2/g", b"after")
        done = c.etcd.revision()
        wait_until(lambda: c.nodes_json(1)["revision"] >= done, VISIBLE_S,
                   what="node 1 applied node 2's changes")
        # The directories took the names first: the files' publishes are refused, and their
        # writers hear it (before, close returned 0 and the bytes were gone).
        for fd in fds:
            with self.assertRaises(OSError) as e:
                os.close(fd)
            self.assertEqual(e.exception.errno, errno.EISDIR)
        for k in (1, 2):
            wait_until(lambda: os.path.isdir(c.path(k, "y")) and os.path.isdir(c.path(k, "y2")),
                       VISIBLE_S, what=f"node {k} shows the directories under their new names")
            self.assertEqual(os.listdir(c.path(k, "y")), ["f"], f"node {k}")
            self.assertEqual(os.listdir(c.path(k, "y2")), ["g"], f"node {k}")
            self.assertEqual(self.read(c, k, "y/f"), b"before")
            self.assertEqual(self.read(c, k, "y2/g"), b"after")

    def test_an_exchange_of_directories_on_another_node_shows_both(self):
        # One commit puts both directories, each under the other's name: applying the first,
        # its new name was still the second's, and a directory kept it; the first stayed out
        # of node 1's tree for good (its subtree with it).
        c = self.cluster(n=2, replicas=1)
        for d in ("a", "b"):
            os.mkdir(c.path(2, d))
            self.write(c, 2, f"{d}/in-{d}", d.encode())
        c.wait_exists(1, "b/in-b", VISIBLE_S)
        rename_exchange(c.path(2, "a"), c.path(2, "b"))
        for k in (2, 1):
            wait_until(lambda: sorted(os.listdir(c.path(k, ""))) == ["a", "b"] and
                       os.listdir(c.path(k, "a")) == ["in-b"] and
                       os.listdir(c.path(k, "b")) == ["in-a"], VISIBLE_S,
                       what=f"node {k} shows a and b exchanged")
        self.assertEqual(self.read(c, 1, "a/in-b"), b"b")

    def test_a_directory_changed_on_another_node_takes_the_time_of_the_change(self):
        # A directory's mtime moved only on the node that changed its entries: node 1 showed
        # the time it had set long after node 2 published into and unlinked from it.
        c = self.cluster(n=2, replicas=1)
        old = 1_300_000_000
        os.mkdir(c.path(1, "d"))
        c.wait_exists(2, "d", VISIBLE_S)

        def set_old_everywhere():
            os.utime(c.path(1, "d"), (old, old))
            for k in (1, 2):
                wait_until(lambda: int(os.stat(c.path(k, "d")).st_mtime) == old, VISIBLE_S,
                           what=f"node {k} shows the time set on node 1")
        set_old_everywhere()
        self.write(c, 2, "d/f", b"new entry")
        c.wait_exists(1, "d/f", VISIBLE_S)
        wait_until(lambda: os.stat(c.path(1, "d")).st_mtime > old, VISIBLE_S,
                   what="node 1 shows d changed by node 2's publish")
        set_old_everywhere()
        os.unlink(c.path(2, "d/f"))
        c.wait_gone(1, "d/f", VISIBLE_S)
        wait_until(lambda: os.stat(c.path(1, "d")).st_mtime > old and
                   os.stat(c.path(1, "d")).st_ctime > old, VISIBLE_S,
                   what="node 1 shows d changed by node 2's unlink")

    def test_a_rename_racing_the_close_that_publishes_the_file_keeps_its_data(self):
        # Node 2 frozen: the close's placement of the chunk waits on its PUT there. A rename of
        # the file on another thread meanwhile carried the same version and placed it again as
        # a new chunk, committed after the close's; the close's chunk was dropped as replaced
        # while node 1 showed it, and every read of the file there failed (EIO) for good.
        c = self.cluster(n=2, replicas=2)
        data = os.urandom(300_000)
        for round_ in range(3):
            f, g = f"f{round_}", f"g{round_}"
            fd = os.open(c.path(1, f), os.O_WRONLY | os.O_CREAT, 0o644)
            os.write(fd, data)
            closer = threading.Thread(target=os.close, args=(fd,))
            renamer = threading.Thread(target=os.rename, args=(c.path(1, f), c.path(1, g)))
            os.kill(c.nodes[2].pid, signal.SIGSTOP)
            try:
                closer.start()
                time.sleep(0.3)  # the close is placing its chunk
                renamer.start()
                time.sleep(0.3)  # the rename is on its way too
            finally:
                os.kill(c.nodes[2].pid, signal.SIGCONT)
            closer.join()
            renamer.join()
            c.wait_exists(2, g, VISIBLE_S)
            self.assertEqual(self.read(c, 2, g), data, f"round {round_}")
            self.assertEqual(c.location(1, g)["chunk_key"], c.location(2, g)["chunk_key"],
                             f"round {round_}: the nodes show one version")
        # A replaced chunk's local copy is kept a few seconds for its readers (kRetireGrace).
        time.sleep(6)
        for round_ in range(3):
            with open(c.path(1, f"g{round_}"), "rb") as fh:  # not the pages the writer left
                os.posix_fadvise(fh.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                self.assertEqual(fh.read(), data, f"round {round_}")

    def test_a_change_etcd_took_after_the_node_gave_up_shows_there(self):
        # etcd applies the rename (the chmod) but its answer is lost: the node gives up when the
        # request times out, the operation fails (EROFS) and the kernel keeps its view from
        # before it. The node's tree kept the change until its reset, which found the tree as
        # etcd has it and told the kernel nothing: the node listed g while stat and open still
        # found f (and showed the old mode) for an hour (kStableTimeout). The stress run, seed
        # 618, saw it so: a directory listed where stat found a file, its subtree unreachable.
        c, relay = self.cluster_with_node_1_behind_a_relay(1)
        for round_ in range(2):
            f, g, data = f"f{round_}", f"g{round_}", f"round {round_}".encode()
            self.write(c, 1, f, data)
            os.chmod(c.path(1, f), 0o644)
            self.assertEqual(self.read(c, 1, f), data)  # the kernel holds f, and g as missing
            self.assertFalse(os.path.exists(c.path(1, g)))
            with relay.swallowing(), self.assertRaises(OSError) as e:
                os.rename(c.path(1, f), c.path(1, g))
            self.assertEqual(e.exception.errno, errno.EROFS)
            self.write_when_accepted(c, 1, f"probe{round_}", b"", f"round {round_}: etcd back")
            self.assertIn(f"/kvfs/d/{1:016x}/{g}", self.etcd_names(c), "etcd took the rename")
            wait_until(lambda: os.path.exists(c.path(1, g)) and
                       not os.path.exists(c.path(1, f)) and self.read(c, 1, g) == data,
                       VISIBLE_S, what=f"round {round_}: the node shows {g}, not {f}")
            with relay.swallowing(), self.assertRaises(OSError) as e:
                os.chmod(c.path(1, g), 0o600)
            self.assertEqual(e.exception.errno, errno.EROFS)
            self.write_when_accepted(c, 1, f"probe{round_}", b"", f"round {round_}: etcd back")
            self.assertEqual(self.etcd_mode(c, os.stat(c.path(1, g)).st_ino), 0o600,
                             "etcd took the chmod")
            wait_until(lambda: os.stat(c.path(1, g)).st_mode & 0o777 == 0o600, VISIBLE_S,
                       what=f"round {round_}: the node shows {g} with etcd's mode")

    def test_a_directory_moved_onto_a_name_this_node_is_taking_stays_in_the_tree(self):
        # Node 1 takes name c (a rename of file x; a new file's publish at its close), its
        # request held in the relay, while node 2 moves directory b, with a file in it, onto c
        # and commits. Node 1 applies that record but not its name (its own change on its way
        # holds c): b leaves its old name and the record waits for the answer (a deferred
        # claim). Node 1's change is refused and the directory must take c on node 1 too. The
        # stress run (seed 920) lost such a directory, with its subtree, on one node: the
        # record applied again was skipped as already applied (NamespaceRemoteTest.
        # ADirectoryWaitingForANewFilesNameTakesItWhenTheFileGoes); here the reset of the
        # refused batch gives the name back first, and both cases pass on that build too.
        c, relay = self.cluster_with_node_1_behind_a_relay(2)
        for round_, holder in enumerate(("rename", "new file") * 2):
            b, x, target = f"b{round_}", f"x{round_}", f"c{round_}"
            os.mkdir(c.path(2, b))
            self.write(c, 2, f"{b}/inner", b"inner")
            c.wait_exists(1, f"{b}/inner", VISIBLE_S)
            if holder == "rename":
                self.write(c, 1, x, b"x")
                c.wait_exists(2, x, VISIBLE_S)
                take = functools.partial(os.rename, c.path(1, x), c.path(1, target))
            else:
                f = open(c.path(1, target), "wb")
                f.write(b"new file")
                take = f.close
            t, errors = errno_thread(take)
            with relay.holding():
                t.start()
                time.sleep(0.3)  # node 1's change is in its tree, its request in the relay
                os.rename(c.path(2, b), c.path(2, target))
                time.sleep(0.5)  # node 1 has node 2's commit
            t.join()
            for k in (1, 2):
                wait_until(lambda: os.path.isdir(c.path(k, target)) and
                           os.path.exists(c.path(k, f"{target}/inner")) and
                           not os.path.exists(c.path(k, b)), VISIBLE_S,
                           what=f"round {round_} ({holder}): node {k} shows {target}/inner "
                           f"(node 1's change answered {errors})")

    def test_a_name_a_file_in_writing_gave_up_goes_to_the_file_etcd_has_there(self):
        # Node 1 creates x and keeps it open (not published: etcd does not know the name);
        # node 2 publishes its own x meanwhile. Node 1's tree gives x to its writer until its
        # publish decides, and node 2's record waits for the name. Node 1's writer then moves
        # its file elsewhere (or unlinks it) before its close: x is free on node 1, and node 2's
        # file, which etcd has at x, must show there.
        c = self.cluster(n=2, replicas=1)
        for round_, leave in enumerate(("rename", "unlink")):
            x, y = f"x{round_}", f"y{round_}"
            f = open(c.path(1, x), "wb")
            self.addCleanup(f.close)
            f.write(b"node 1's")
            self.write(c, 2, x, b"node 2's")
            time.sleep(0.5)  # node 1 has node 2's commit
            if leave == "rename":
                os.rename(c.path(1, x), c.path(1, y))
            else:
                os.unlink(c.path(1, x))
            f.close()
            wait_until(lambda: os.path.exists(c.path(1, x)) and
                       self.read(c, 1, x) == b"node 2's", VISIBLE_S,
                       what=f"round {round_} ({leave}): node 1 shows node 2's {x}")
            self.assertEqual(self.read(c, 2, x), b"node 2's")
            if leave == "rename":
                for k in (1, 2):
                    c.wait_exists(k, y, VISIBLE_S)
                    self.assertEqual(self.read(c, k, y), b"node 1's")

    def test_two_nodes_making_one_directory_at_once_both_show_it(self):
        # mkdir -p of one hash fan-out directory on two nodes at once: node 1's mkdir is on its
        # way (held in the relay) when node 2's commits. Node 1's is refused (EEXIST) and
        # node 1 must show node 2's directory, whose record reached it while its own held the
        # name.
        c, relay = self.cluster_with_node_1_behind_a_relay(2)
        for round_ in range(3):
            d = f"d{round_}"
            t, errors = errno_thread(os.mkdir, c.path(1, d))
            with relay.holding():
                t.start()
                time.sleep(0.3)  # node 1's mkdir is in its tree, its request in the relay
                os.mkdir(c.path(2, d))
                self.write(c, 2, f"{d}/f", b"node 2's")
                time.sleep(0.5)  # node 1 has node 2's commits
            t.join()
            self.assertIn(errors, ([], [errno.EEXIST]))
            # os.makedirs(exist_ok=True) checks isdir right after EEXIST.
            self.assertTrue(os.path.isdir(c.path(1, d)), f"round {round_}: {errors}")
            for k in (1, 2):
                wait_until(lambda: os.path.isdir(c.path(k, d)) and
                           os.path.exists(c.path(k, f"{d}/f")), VISIBLE_S,
                           what=f"round {round_}: node {k} shows {d}/f (node 1's mkdir "
                           f"answered {errors})")

    def test_attributes_a_failed_change_showed_meanwhile_are_taken_back(self):
        # A chmod waiting on a frozen etcd is in the node's tree meanwhile: a stat from another
        # thread shows it, and the kernel keeps that answer. etcd dies without taking it, the
        # chmod fails (EROFS) and the file is reset to etcd's state, but the reset told the
        # kernel only of a new version, not of attributes: the node showed the mode etcd never
        # took for an hour (kStableTimeout).
        c = self.cluster(n=1, replicas=1)
        self.write(c, 1, "f", b"data")
        os.chmod(c.path(1, "f"), 0o644)
        t, errors = errno_thread(os.chmod, c.path(1, "f"), 0o600)
        c.etcd.pause()
        try:
            t.start()
            time.sleep(0.5)  # the chmod waits on etcd
            shown = os.stat(c.path(1, "f")).st_mode & 0o777
        finally:
            c.etcd.kill9()  # the chmod's request dies with it, never applied
        t.join()
        c.etcd.start()
        self.assertEqual(errors, [errno.EROFS])
        self.assertEqual(shown, 0o600, "the tree showed the chmod while it waited")
        wait_until(lambda: os.stat(c.path(1, "f")).st_mode & 0o777 == 0o644, VISIBLE_S,
                   what="the node shows etcd's mode again")

    def test_a_change_waiting_on_etcd_when_it_freezes_fails_and_the_node_goes_on(self):
        # etcd stops answering while a change is on its way to it (before the node's keepalive
        # notices and refuses changes up front): that change fails with EROFS after the etcd
        # request's timeout, and the node goes on. (Before, the commit thread reported the
        # failure while holding the lock the report takes: it deadlocked, that close(2) and
        # every later change and watch event of the node hung for good.)
        c = self.cluster(n=2, replicas=2)
        self.write(c, 1, "before", b"b")
        c.wait_exists(2, "before", VISIBLE_S)
        script = ("import errno, os, sys\n"
                  "try:\n    os.mkdir(sys.argv[1]); print('ok')\n"
                  "except OSError as e:\n    print(errno.errorcode[e.errno])\n")
        c.etcd.pause()
        try:
            child = subprocess.Popen([sys.executable, "-c", script, c.path(1, "in-flight")],
                                     stdout=subprocess.PIPE)
            # A child stuck in a FUSE request cannot be killed; it goes with the daemon.
            self.addCleanup(lambda: child.poll() is None and child.kill())
            wait_until(lambda: child.poll() is not None, 15.0, 0.1,
                       what="mkdir returns while etcd is frozen")
            self.assertEqual(child.stdout.read().strip(), b"EROFS")
            self.assertEqual(self.read(c, 1, "before"), b"b")  # reads go on
        finally:
            c.etcd.resume()
        self.write_when_accepted(c, 1, "after", b"a", "node 1 accepts changes again")
        c.wait_exists(2, "after", VISIBLE_S)
        self.write(c, 2, "from2", b"2")
        c.wait_exists(1, "from2", VISIBLE_S)

    def test_frozen_node_catches_up_after_sigcont(self):
        c = self.cluster(n=2, replicas=1)
        os.mkdir(c.path(1, "f"))
        self.write(c, 1, "f/keep", b"old")
        self.write(c, 1, "f/drop", b"drop me")
        c.wait_exists(2, "f/drop", VISIBLE_S)
        self.assertEqual(self.read(c, 2, "f/keep"), b"old")
        pid = c.node(2).pid
        os.kill(pid, signal.SIGSTOP)
        try:
            # frozen past its lease: node 1 sees it leave
            c.wait_state(1, 2, "down", DOWN_S)
            self.write(c, 1, "f/new1", b"new one")
            self.write(c, 1, "f/new2", b"new two")
            self.write(c, 1, "f/keep", b"overwritten")
            os.unlink(c.path(1, "f/drop"))
        finally:
            os.kill(pid, signal.SIGCONT)
        c.wait_exists(2, "f/new2", VISIBLE_S)
        c.wait_gone(2, "f/drop", VISIBLE_S)
        self.assertEqual(self.read(c, 2, "f/new1"), b"new one")
        wait_until(lambda: self.read(c, 2, "f/keep") == b"overwritten", VISIBLE_S,
                   what="node 2 sees the overwrite made while it was frozen")
        c.wait_state(1, 2, "up", DOWN_S)

    def test_etcd_frozen_refuses_changes_reads_go_on_then_recovers(self):
        c = self.cluster(n=2, replicas=2)
        data = chunk_bytes("e", 300_000)
        self.write(c, 1, "e", data)
        c.wait_exists(2, "e", VISIBLE_S)
        c.etcd.pause()
        try:
            # membership notices within a lease period; then every change is refused at once
            wait_until(lambda: not c.nodes_json(1)["etcd_reachable"], 15.0, 0.2,
                       what="node 1 notices etcd is gone")
            t0 = time.monotonic()
            with self.assertRaises(OSError) as e:
                os.mkdir(c.path(1, "nope"))
            self.assertEqual(e.exception.errno, errno.EROFS)
            self.assertLess(time.monotonic() - t0, 5.0)
            fd = os.open(c.path(1, "late"), os.O_CREAT | os.O_WRONLY, 0o644)
            os.write(fd, b"x" * 1000)
            with self.assertRaises(OSError) as e:
                os.close(fd)  # the publish at close is refused
            self.assertEqual(e.exception.errno, errno.EROFS)
            # reads go on, on both nodes
            self.assertEqual(self.read(c, 1, "e"), data)
            self.assertEqual(self.read(c, 2, "e"), data)
            r = c.kvfsctl("nodes", c.path(1))
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("UNREACHABLE", r.stdout)
            self.assertRegex(c.log(1), r"etcd unreachable")
        finally:
            c.etcd.resume()
        wait_until(lambda: c.nodes_json(1)["etcd_reachable"], 20.0, 0.2,
                   what="node 1 sees etcd back")
        # the refused file is not left behind half-published; new changes work everywhere
        wait_until(lambda: not os.path.exists(c.path(1, "late")), 10.0,
                   what="the refused publish is undone")
        os.mkdir(c.path(1, "after"))
        self.write(c, 1, "after/f", b"back")
        c.wait_exists(2, "after/f", VISIBLE_S)
        self.assertEqual(self.read(c, 2, "after/f"), b"back")

    def test_etcd_killed_and_restarted(self):
        c = self.cluster(n=2, replicas=2)
        self.write(c, 1, "before", b"b" * 5000)
        c.wait_exists(2, "before", VISIBLE_S)
        c.etcd.kill9()
        time.sleep(1.0)
        self.assertEqual(self.read(c, 2, "before"), b"b" * 5000)
        c.etcd.start()
        # both nodes register again (their leases may have expired) and accept changes
        self.write_when_accepted(c, 2, "after", b"a" * 5000,
                                  "node 2 accepts changes after etcd restarted")
        c.wait_exists(1, "after", VISIBLE_S)
        self.assertEqual(self.read(c, 1, "after"), b"a" * 5000)
        wait_until(lambda: {n["id"]: n["state"] for n in c.nodes_json(1)["nodes"]} ==
                   {1: "self", 2: "up"}, DOWN_S, 0.2, what="both nodes registered again")

    def test_changes_after_etcd_died_are_refused_up_front_and_resume_soon_after(self):
        # A long lease: the keepalive (every 10 s here) would notice etcd's death late. The
        # first change that finds etcd gone makes the node refuse the next ones up front and
        # says so once; it then asks etcd twice a second and takes changes soon after it is
        # back. (Before: every change went to etcd and logged its own error line, 40 here.)
        c = self.cluster(n=1, replicas=1, lease_ttl_s=30)
        self.write(c, 1, "before", b"b")
        c.etcd.kill9()
        codes = []
        for i in range(40):
            try:
                os.mkdir(c.path(1, f"d{i}"))
                codes.append("ok")
            except OSError as e:
                codes.append(errno.errorcode[e.errno])
        self.assertEqual(set(codes), {"EROFS"}, codes)
        self.assertEqual(self.read(c, 1, "before"), b"b")
        log = c.log(1)
        self.assertLessEqual(log.count("etcd unreachable during a namespace change"), 2, log[-3000:])
        self.assertEqual(log.count("namespace changes refused (EROFS) until it is back"), 1,
                         log[-3000:])
        c.etcd.start()
        def accepted():
            try:
                self.write(c, 1, "after", b"a")
                return True
            except OSError:
                return False
        wait_until(accepted, 5.0, 0.1, what="changes accepted within 5 s of etcd's return")
        self.assertEqual(self.read(c, 1, "after"), b"a")

    def test_a_write_opened_before_the_reset_of_a_refused_creation_is_kept(self):
        # etcd down: a new file's publish is refused (EROFS), and the fs shows the file until
        # etcd answers again and the refused creation is reset (the file goes). A writer that
        # opened the file in between (a connector writing the same name again) lost its write:
        # the reset took the name from under it, and its close succeeded with nothing
        # published (seen in a full ctest run). Now the reset of a file etcd never held waits
        # for its writer's close: a close that wrote publishes it, one that did not ends it.
        c = self.cluster(n=2, replicas=1, lease_ttl_s=30)
        c.etcd.kill9()
        for name in ("kept", "dropped"):
            with self.assertRaises(OSError) as refused:
                self.write(c, 1, name, b"first")
            self.assertEqual(refused.exception.errno, errno.EROFS)
        rewrite = open(c.path(1, "kept"), "r+b")
        untouched = open(c.path(1, "dropped"), "r+b")
        try:
            c.etcd.start()
            self.write_when_accepted(c, 1, "sentinel", b"s", "node 1 accepts changes again")
            # The watch thread resets the refused changes once etcd answers: give it time.
            time.sleep(1.0)
            rewrite.write(b"second")
        finally:
            rewrite.close()  # raises if the publish failed
            untouched.close()
        self.assertEqual(self.read(c, 1, "kept"), b"second")
        c.wait_exists(2, "kept", VISIBLE_S)
        self.assertEqual(self.read(c, 2, "kept"), b"second")
        # With its name: etcd's name key is what makes O_EXCL and renames hold across nodes.
        name_key = c.etcd.call("/v3/kv/range", {
            "key": base64.b64encode(b"/kvfs/d/0000000000000001/kept").decode()})
        self.assertIn("kvs", name_key, "the record was published without its name key")
        # The other writer wrote nothing: its close let the reset go on.
        wait_until(lambda: not os.path.exists(c.path(1, "dropped")), VISIBLE_S, 0.05,
                   what="the refused creation of 'dropped' is reset at its writer's close")
        self.assertEqual(sorted(os.listdir(c.path(2))), ["kept", "sentinel"])

    def test_a_name_left_without_its_record_is_taken_by_the_next_change(self):
        # A name key whose record is gone (seen under random etcd stalls: a removal built on a
        # name etcd never gave the object deleted another name and left this one) refused every
        # publish to that name with EAGAIN, on every node, for good. The next change takes it.
        c = self.cluster(n=2, replicas=1)
        os.mkdir(c.path(1, "d"))
        c.wait_exists(2, "d")
        parent = os.stat(c.path(1, "d")).st_ino
        gone = (1 << 48) | 0xABCDEF  # node 1's id space, never handed out
        for name in ("published", "created"):
            key = f"/kvfs/d/{parent:016x}/{name}".encode()
            c.etcd.call("/v3/kv/put", {"key": base64.b64encode(key).decode(),
                                       "value": base64.b64encode(b"%016x" % gone).decode()})
        self.assertFalse(os.path.exists(c.path(1, "d/published")))
        write_file_atomic(c.path(1, "d/published"), b"by rename")
        self.assertEqual(self.read(c, 1, "d/published"), b"by rename")
        fd = os.open(c.path(2, "d/created"), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b"by O_EXCL")
        os.close(fd)
        for k in (1, 2):
            c.wait_exists(k, "d/published", VISIBLE_S)
            c.wait_exists(k, "d/created", VISIBLE_S)
            self.assertEqual(self.read(c, k, "d/published"), b"by rename")
            wait_until(lambda: self.read(c, k, "d/created") == b"by O_EXCL", VISIBLE_S,
                       what=f"node {k} reads the file made over the stale name")

    def test_watch_behind_compaction_resyncs(self):
        c = self.cluster(n=2, replicas=1)
        os.mkdir(c.path(1, "c"))
        for i in range(5):
            self.write(c, 1, f"c/old{i}", b"o%d" % i)
        c.wait_exists(2, "c/old4", VISIBLE_S)
        pid = c.node(2).pid
        os.kill(pid, signal.SIGSTOP)
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
        os.kill(pid3, signal.SIGSTOP)
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
        os.mkdir(c.path(1, "h"))
        lease = c.etcd.call("/v3/lease/grant", {"TTL": 60})["ID"]
        put = c.etcd.call("/v3/kv/put", {"key": base64.b64encode(b"/kvfs/s/00002").decode(),
                                          "value": "", "lease": lease})
        hold = int(put["header"]["revision"])
        stop = threading.Event()

        def publish():
            n = 0
            while not stop.is_set():
                write_file_atomic(c.path(1, f"h/f{n % 20}"), b"v%d" % n)
                n += 1

        publisher = threading.Thread(target=publish)
        publisher.start()
        try:
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
        finally:
            stop.set()
            publisher.join()

    def seeded_cluster(self, count):
        """Node 1 alone with 1 s of etcd history over `count` names seeded straight into etcd
        (seed/), once it has taken them all in (node 1 compacts to what it has applied)."""
        if not os.access(seed_bin(), os.X_OK):
            self.skipTest(f"{seed_bin()} not built (KVFS_BUILD_BENCH=OFF)")
        c = self.cluster(n=2, replicas=1, start_nodes=[1], extra_args=["--etcd-history", "1"])
        seeded = subprocess.run([seed_bin(), "--etcd", c.etcd.endpoint, "--dir", "seed",
                                 "--count", str(count)], capture_output=True, text=True,
                                timeout=600)
        self.assertEqual(seeded.returncode, 0, seeded.stderr)
        wait_until(lambda: os.path.isdir(c.path(1, "seed")) and
                   count_names(c.path(1, "seed")) == count, 60, 0.5, what="node 1 has the names")
        return c

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
        # compaction at its revision (a key under its lease) until its read is done.
        count = 150000
        c = self.seeded_cluster(count)
        seeded_to = c.etcd.revision()
        with self.publishing(c):
            # Node 1 compacts about once a second, to what etcd held a second before.
            wait_until(lambda: c.nodes_json(1)["compacted_revision"] > seeded_to, 60, 0.2,
                       what="node 1 compacts past the seeded names")
            c.start_node(2)
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
            return "kvs" in c.etcd.call("/v3/kv/range", {
                "key": base64.b64encode(b"/kvfs/s/00002").decode()})

        started = []

        def start_node_2():
            try:
                c.start_node(2)
                started.append(None)
            except Exception as e:  # reported by the test thread below
                started.append(e)

        c.node(2).mount.mount_timeout_s = 120  # the frozen seconds and two reads, on 2 cores
        starter = threading.Thread(target=start_node_2)
        with self.publishing(c):
            starter.start()
            wait_until(hold_of_node_2, 60, 0.01, what="node 2 holds compaction for its read")
            pid = c.node(2).pid
            os.kill(pid, signal.SIGSTOP)
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

    def test_a_wiped_etcd_is_read_again_and_its_lost_names_go(self):
        # etcd restarted on an empty data dir (or an older backup): the revisions the nodes
        # applied are gone. Node 1 sees etcd's revision behind its own; node 2, frozen through
        # the wipe while node 1 publishes past its old revision, sees another cluster id. Both
        # read the namespace again: the lost names go, the new ones are there. (Before, both
        # kept every old name, and node 2 waited for revisions the new etcd had used already.)
        c = self.cluster(n=2, replicas=2)
        os.mkdir(c.path(1, "w"))
        for i in range(6):
            self.write(c, 1, f"w/old{i}", chunk_bytes(f"old{i}", 50_000))
        c.wait_exists(2, "w/old5", VISIBLE_S)
        old_revision = c.etcd.revision()
        pid = c.node(2).pid
        os.kill(pid, signal.SIGSTOP)
        try:
            c.etcd.kill9()
            shutil.rmtree(c.etcd.dir)
            c.etcd.start()

            self.write_when_accepted(c, 1, "new0", b"n0",
                                      "node 1 accepts changes on the new etcd")
            i = 1
            while c.etcd.revision() <= old_revision + 5:
                self.write(c, 1, f"new{i}", b"n%d" % i)
                i += 1
        finally:
            os.kill(pid, signal.SIGCONT)
        want = sorted(f"new{j}" for j in range(i))
        for k in (1, 2):
            wait_until(lambda: sorted(n for n in os.listdir(c.path(k)) if n != "w") == want
                       and not os.path.exists(c.path(k, "w/old0")), 20.0, 0.2,
                       what=f"node {k} holds only what the new etcd holds")
            self.assertRegex(c.log(k), r"etcd lost the namespace history")
        # The wipe took node 1's registration too: it registers again once its member watch
        # sees that, and node 2 reads from it once it sees it.
        c.wait_state(2, 1, "up", DOWN_S)
        self.assertEqual(self.read(c, 2, f"new{i - 1}"), b"n%d" % (i - 1))
        self.write(c, 2, "from2", b"2")
        c.wait_exists(1, "from2", VISIBLE_S)

    def test_after_an_etcd_wipe_the_nodes_register_again_at_once(self):
        # The wipe takes every registration. Each node sees its own key gone (its member watch
        # reads etcd again) and registers at once, not at its next lease keepalive: with a 60 s
        # TTL that is 20 s after the last one, and until then no node reads from it. (Before,
        # node 1 came back only then.)
        c = self.cluster(n=2, replicas=1, lease_ttl_s=60)
        c.etcd.kill9()
        shutil.rmtree(c.etcd.dir)
        c.etcd.start()
        wiped = time.monotonic()

        def registered(k):
            key = base64.b64encode(b"/kvfs/m/%05d" % k).decode()
            kvs = c.etcd.call("/v3/kv/range", {"key": key}).get("kvs", [])
            return len(kvs) == 1 and int(kvs[0].get("lease", 0)) != 0
        for k in (1, 2):
            wait_until(lambda: registered(k), 8.0, 0.1, what=f"node {k} registered again")
        self.assertLess(time.monotonic() - wiped, 8.0)
        c.wait_state(2, 1, "up", VISIBLE_S)
        c.wait_state(1, 2, "up", VISIBLE_S)
        self.assertRegex(c.log(1), r"etcd no longer lists node 1; registering it again now")
        # Node 2 reads what only node 1 holds.
        self.write_when_accepted(c, 1, "after", chunk_bytes("after", 300_000),
                                  "node 1 accepts changes on the new etcd")
        self.assertEqual([h["id"] for h in c.location(1, "after")["holders"]], [1])
        c.wait_exists(2, "after", VISIBLE_S)
        self.assertEqual(self.read(c, 2, "after"), chunk_bytes("after", 300_000))
        # A member key deleted by hand, its lease alive: put back at once too.
        c.etcd.call("/v3/kv/deleterange", {"key": base64.b64encode(b"/kvfs/m/00001").decode()})
        deleted = time.monotonic()
        wait_until(lambda: registered(1), 8.0, 0.1, what="node 1 registered again")
        self.assertLess(time.monotonic() - deleted, 8.0)

    def test_an_etcd_restored_from_an_older_backup_is_what_the_nodes_show(self):
        # The backup has the same epoch; its revision is behind the nodes'. What etcd holds
        # wins on every node: a name made after the backup goes, a file rewritten after it
        # shows the backup's version again (attributes; its old data may be gone).
        c = self.cluster(n=2, replicas=2)
        self.write(c, 1, "kept", chunk_bytes("kept", 40_000))
        self.write(c, 1, "x", chunk_bytes("x1", 100_000))
        c.wait_exists(2, "x", VISIBLE_S)
        c.etcd.stop()
        backup = c.etcd.dir + ".backup"
        shutil.copytree(c.etcd.dir, backup)
        self.addCleanup(shutil.rmtree, backup, True)
        c.etcd.start()

        self.write_when_accepted(c, 1, "x", chunk_bytes("x2", 200_000),
                                  "node 1 accepts changes after etcd restarted")
        self.write(c, 1, "after", b"made after the backup")
        for k in (1, 2):
            c.wait_exists(k, "after", VISIBLE_S)
            wait_until(lambda: os.stat(c.path(k, "x")).st_size == 200_000, VISIBLE_S, 0.1,
                       what=f"node {k} sees x rewritten")
        c.etcd.kill9()
        shutil.rmtree(c.etcd.dir)
        shutil.copytree(backup, c.etcd.dir)
        c.etcd.start()
        for k in (1, 2):
            wait_until(lambda: not os.path.lexists(c.path(k, "after"))
                       and os.stat(c.path(k, "x")).st_size == 100_000, 20.0, 0.2,
                       what=f"node {k} shows what the restored etcd holds")
            self.assertRegex(c.log(k), r"etcd lost the namespace history")
            self.assertEqual(self.read(c, k, "kept"), chunk_bytes("kept", 40_000))

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
