"""A kvfs daemon killed (kill -9) while the kernel holds one of its cache invalidations must not
leave its mount wedged (tests/pylib/kvfs_cluster.py, 2 nodes on loopback).

Why this can wedge: the daemon's notifier thread writes invalidations to /dev/fuse, and the
kernel may block that write on a lock held by a process whose own request to the daemon is still
unanswered (a READ holds its page locked). After SIGKILL that thread cannot die (it sleeps
uninterruptibly), so the daemon never closes /dev/fuse, the kernel never ends the connection, and
the process in the mount, the daemon (an unreapable zombie) and the mount hang for ever. The
daemon's connection watchdog (fs/connection_watchdog.h) ends the connection instead.

The test aborts the connection itself (fusectl) when the daemon did not, so a failure never leaves
a wedged mount behind."""

import errno
import os
import signal
import subprocess
import sys
import time
import unittest

import test_cluster_mount as base
from kvfs_cluster import wait_until
from kvfs_testlib import chunk_bytes, freeze
from test_cluster_mount import VISIBLE_S, holder_ids

FUSECTL = "/sys/fs/fuse/connections"
# How long the daemon and the process in its mount may take to be gone after the kill.
GONE_S = 10.0

# Reads the whole file through the page cache (READs hold their pages locked until answered).
_BUFFERED_READER = r"""
import sys
try:
    with open(sys.argv[1], "rb") as f:
        f.read()
    print("OK")
except OSError as e:
    print("ERR", e.errno)
"""


def gets_sent(c, k, to):
    (row,) = [n for n in c.nodes_json(k)["nodes"] if n["id"] == to]
    return int(row.get("gets_sent", 0))


def stuck_in_invalidation(pid):
    """Whether a thread of `pid` sleeps in the kernel inside a FUSE invalidation (root only:
    /proc/PID/task/TID/stack); None when the stacks cannot be read."""
    readable = False
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stack") as f:
                stack = f.read()
        except OSError:
            continue
        readable = True
        if "fuse_reverse_inval" in stack:
            return True
    return False if readable else None


def process_gone(pid):
    """Gone or a zombie whose every thread has exited (only its parent's wait is missing)."""
    try:
        return len(os.listdir(f"/proc/{pid}/task")) <= 1 and _state(pid) in ("Z", "X")
    except OSError:
        return True


def _state(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def abort_connection(minor):
    """The operator's way out of a wedged FUSE mount: fusectl's abort file."""
    if not os.path.isdir(os.path.join(FUSECTL, str(minor))):
        subprocess.run(["mount", "-t", "fusectl", "fusectl", FUSECTL], stderr=subprocess.DEVNULL)
    try:
        with open(os.path.join(FUSECTL, str(minor), "abort"), "w") as f:
            f.write("1")
    except OSError:
        pass


class DaemonDeath(unittest.TestCase):
    cluster = base.ClusterMount.cluster

    def test_kill9_while_the_kernel_holds_an_invalidation_does_not_wedge_the_mount(self):
        # Node 2 reads a file only node 1 holds, with node 1 frozen: the READ waits for its GET
        # (30 s request timeout) and holds its page locked. Node 3 then rewrites the file; node
        # 2 asks its kernel to drop the file's pages, and the kernel blocks that on the locked
        # page. Node 2 is killed in that state.
        c = self.cluster(n=3, replicas=1, request_timeout_ms=30000)
        data = chunk_bytes("wedge", 3 << 20)
        c.publish(1, "wedge", data)
        c.wait_exists(2, "wedge", VISIBLE_S)
        self.assertEqual(holder_ids(c.location(2, "wedge")), [1])
        minor = os.minor(os.stat(c.path(2)).st_dev)
        node1, node2 = c.node(1).pid, c.node(2).pid
        before = gets_sent(c, 2, 1)
        freeze(node1)
        reader = None
        try:
            reader = subprocess.Popen([sys.executable, "-c", _BUFFERED_READER, c.path(2, "wedge")],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            wait_until(lambda: gets_sent(c, 2, 1) > before, VISIBLE_S, 0.01,
                       what="node 2's GET from the frozen node 1")
            time.sleep(0.3)  # the reader's READ is in the daemon, its page locked
            writer = subprocess.run(
                [sys.executable, "-c",
                 "import sys; open(sys.argv[1], 'wb').write(b'new version' * 1000)",
                 c.path(3, "wedge")], timeout=20, capture_output=True)
            self.assertEqual(writer.returncode, 0, writer.stderr)
            stacks_readable = stuck_in_invalidation(node2) is not None
            if stacks_readable:
                wait_until(lambda: stuck_in_invalidation(node2), 5.0, 0.02,
                           what="node 2's invalidation blocked by the locked page")
            else:
                time.sleep(1.0)  # give the invalidation time to block
            self.assertIsNone(reader.poll(), "the reader should still wait for its READ")

            os.kill(node2, signal.SIGKILL)
            t0 = time.monotonic()
            try:
                out, _ = reader.communicate(timeout=GONE_S)
            except subprocess.TimeoutExpired:
                out = None
            reader_s = time.monotonic() - t0
            daemon_gone = c.node(2).mount._wait_pid(node2, max(0.1, GONE_S - reader_s))
            self.assertIsNotNone(out, f"the reader in the dead mount still hangs after {GONE_S} s")
            self.assertTrue(out.startswith(b"ERR"), out)
            self.assertIn(int(out.split()[1]), (errno.ENOTCONN, errno.ECONNABORTED, errno.EIO), out)
            self.assertTrue(daemon_gone, "the killed daemon did not exit (a zombie thread "
                                         "in the kernel holds its /dev/fuse open)")
            if stacks_readable:  # it was stuck: the watchdog says what it did
                self.assertIn(f"aborted FUSE connection {minor}", c.log(2))
        finally:
            if reader is not None and reader.poll() is None or not process_gone(node2):
                abort_connection(minor)  # never leave the machine with a wedged mount
            if reader is not None:
                if reader.poll() is None:
                    reader.kill()
                reader.communicate()
            os.kill(node1, signal.SIGCONT)
            c.node(2).mount.kill9()  # reaps it and detaches its mount


if __name__ == "__main__":
    unittest.main()
