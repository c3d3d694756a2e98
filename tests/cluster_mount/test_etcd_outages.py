"""etcd failing under a cluster, through real mounts: etcd frozen (changes refused with EROFS,
reads go on, recovery by itself), killed and restarted, wiped, restored from an older backup;
changes on their way when it goes.

Every test starts its own etcd and nodes and stops them by PID at the end."""

import base64
import errno
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from cluster_etcd_case import ClusterEtcdCase, VISIBLE_S, DOWN_S
from kvfs_cluster import wait_until
from kvfs_etcd import endpoints, etcd_members, start_members
from kvfs_testlib import chunk_bytes, write_file_atomic, freeze


class EtcdOutages(ClusterEtcdCase):
    def test_an_etcd_of_three_members_loses_one_then_its_quorum_and_gets_it_back(self):
        # The etcd an inference cluster already runs has three members. Nodes given every
        # member's URL go on when the member they use dies (the next URL takes over, and the
        # watch resumes there), refuse changes with EROFS while the members left have no
        # quorum (reads go on), and take changes again by themselves once it is back.
        root = tempfile.mkdtemp(prefix="kvfs-etcd3-")
        self.addCleanup(shutil.rmtree, root, True)
        members = etcd_members(root, 3)
        for m in members:
            self.addCleanup(m.stop)
        start_members(members)
        c = self.cluster(n=2, replicas=2, start_nodes=[])
        for k in (1, 2):
            c.etcd_endpoint_of[k] = endpoints(members)
            c.start_node(k)
        c.wait_joined([1, 2])
        for i in range(5):
            c.publish(1, f"a{i}", chunk_bytes(f"a{i}", 100_000))
        c.wait_exists(2, "a4", VISIBLE_S)
        members[0].kill9()  # the first URL: where both nodes began
        self.write_when_accepted(c, 1, "b0", b"b0", "node 1 publishes with member 0 dead")
        for i in range(1, 10):
            c.publish(1, f"b{i}", f"b{i}".encode())
        c.wait_exists(2, "b9", VISIBLE_S)
        self.write_when_accepted(c, 2, "c0", b"c0", "node 2 publishes with member 0 dead")
        c.wait_exists(1, "c0", VISIBLE_S)
        members[1].kill9()  # one member of three left: no quorum
        with self.assertRaises(OSError) as e:
            for i in range(20):  # the first may be on its way when the quorum goes
                c.publish(1, f"noquorum{i}", b"q")
        self.assertEqual(e.exception.errno, errno.EROFS)
        for k in (1, 2):
            with open(c.path(k, "a3"), "rb") as f:
                self.assertTrue(f.read() == chunk_bytes("a3", 100_000), f"node {k}")
        members[1].start()
        self.write_when_accepted(c, 1, "d1", b"d1", "node 1 publishes once the quorum is back")
        self.write_when_accepted(c, 2, "d2", b"d2", "node 2 publishes once the quorum is back")
        c.wait_exists(1, "d2", VISIBLE_S)
        c.wait_exists(2, "d1", VISIBLE_S)
        in_etcd = {key.rsplit("/", 1)[1] for key, _ in members[2].range_prefix("/kvfs/d/")}
        wait_until(lambda: set(os.listdir(c.path(1))) == set(os.listdir(c.path(2))) == in_etcd,
                   VISIBLE_S, what="both nodes show what etcd holds")

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
        freeze(pid)
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
        self.write(c, 1, "w", b"old")
        c.wait_exists(2, "e", VISIBLE_S)
        c.wait_exists(2, "w", VISIBLE_S)
        c.etcd.pause()
        try:
            # membership notices within a lease period; then every change is refused at once
            wait_until(lambda: not c.nodes_json(1)["etcd_reachable"], 15.0, 0.2,
                       what="node 1 notices etcd is gone")
            t0 = time.monotonic()
            mode = os.stat(c.path(1, "e")).st_mode
            # Refused up front, and a refused call changes nothing, not even for a while: each
            # of these showed on node 1 until etcd was back (and the reset ran).
            refusals = [
                lambda: os.mkdir(c.path(1, "nope")),
                lambda: os.open(c.path(1, "late"), os.O_CREAT | os.O_WRONLY, 0o644),
                lambda: os.setxattr(c.path(1, "e"), "user.refused", b"1"),
                lambda: os.setxattr(c.path(1, "e"), "user.kvfs.pin", b"1"),
                lambda: os.chmod(c.path(1, "e"), 0o600),
                lambda: os.rename(c.path(1, "e"), c.path(1, "e2")),
                lambda: os.symlink("e", c.path(1, "l")),
            ]
            for i, call in enumerate(refusals):
                with self.assertRaises(OSError, msg=f"call {i}") as e:
                    call()
                self.assertEqual(e.exception.errno, errno.EROFS, f"call {i}")
            self.assertLess(time.monotonic() - t0, 5.0)
            self.assertEqual(sorted(os.listdir(c.path(1))), ["e", "w"])
            self.assertEqual(os.listxattr(c.path(1, "e")), [])
            self.assertEqual(os.getxattr(c.path(1, "e"), "user.kvfs.pin"), b"0")
            self.assertEqual(os.stat(c.path(1, "e")).st_mode, mode)
            # A rewrite of a file that exists is refused when it would publish, at close, and
            # its bytes do not show (they did on node 1 until etcd answered and the reset ran).
            fd = os.open(c.path(1, "w"), os.O_WRONLY)
            os.write(fd, b"new")
            with self.assertRaises(OSError) as e:
                os.close(fd)
            self.assertEqual(e.exception.errno, errno.EROFS)
            self.assertEqual(self.read(c, 1, "w"), b"old")
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
        # the refused rewrite is undone; new changes work everywhere
        wait_until(lambda: self.read(c, 1, "w") == b"old", 10.0,
                   what="the refused rewrite is undone")
        self.assertEqual(self.read(c, 2, "w"), b"old")
        self.assertEqual(os.listxattr(c.path(2, "e")), [])
        os.setxattr(c.path(1, "e"), "user.accepted", b"2")
        wait_until(lambda: os.listxattr(c.path(2, "e")) == ["user.accepted"], VISIBLE_S,
                   what="an xattr set after etcd is back on node 2")
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
        refused_before = c.nodes_json(1)["namespace"]["refused_unreachable"]
        c.etcd.kill9()
        codes = []
        for i in range(40):
            try:
                os.mkdir(c.path(1, f"d{i}"))
                codes.append("ok")
            except OSError as e:
                codes.append(errno.errorcode[e.errno])
        self.assertEqual(set(codes), {"EROFS"}, codes)
        # kvfsctl nodes counts them (all but the one or two that went to etcd to find it gone)
        refused = c.nodes_json(1)["namespace"]["refused_unreachable"] - refused_before
        self.assertTrue(38 <= refused <= 40, refused)
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
        # Only the change that finds etcd gone shows (the node refuses the next ones before
        # they change anything): one outage for each file.
        c = self.cluster(n=2, replicas=1, lease_ttl_s=30)
        opened = {}
        for name in ("dropped", "kept"):
            c.etcd.kill9()
            with self.assertRaises(OSError) as refused:
                self.write(c, 1, name, b"first")
            self.assertEqual(refused.exception.errno, errno.EROFS)
            opened[name] = open(c.path(1, name), "r+b")
            c.etcd.start()
            self.write_when_accepted(c, 1, f"sentinel-{name}", b"s",
                                     "node 1 accepts changes again")
        rewrite, untouched = opened["kept"], opened["dropped"]
        try:
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
        self.assertEqual(sorted(os.listdir(c.path(2))),
                         ["kept", "sentinel-dropped", "sentinel-kept"])

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
        freeze(pid)
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
        # wins on every node: a name made after the backup goes. A file rewritten after it
        # goes too: the backup names the old version, whose copies both holders dropped when
        # the new one replaced it, so each leaves its holder list and the last removes the
        # record (before, the file stayed, and every read of it failed with EIO).
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
                       and not os.path.lexists(c.path(k, "x")), 20.0, 0.2,
                       what=f"node {k} shows what the restored etcd holds")
            self.assertRegex(c.log(k), r"etcd lost the namespace history")
            self.assertEqual(self.read(c, k, "kept"), chunk_bytes("kept", 40_000))
        self.assertRegex(c.log(1) + c.log(2), r"removed: its last copy went")


if __name__ == "__main__":
    unittest.main()
