"""Three nodes publish (temp file + rename), rename and unlink in one directory while etcd stalls
at random (SIGSTOP for up to 4 s, then runs for up to 2 s), so changes are refused up front,
time out on their way, or commit while their node has given up on them. Once etcd runs again
every node must show the same names, each name the same whole version on every node.

Two defects made nodes part for good here, each in about one run of eight: a reset of a refused
change, read from etcd before a later change of the same node committed, moved a name off that
change's file; and another node's older commit took a name that this node's newer commit held.
Either way the node showed no file where the others showed its own.

With both fixed, runs still ended badly now and then: a rename refused (EAGAIN) five times over,
by a change built on a refused one before its reset (a publish right after etcd came back) and
by a change meeting the watch thread's reset in progress, both fixed since; and nodes differing
on a file, about 1 run in 25 (2026-11-27, traced with the debug lines of every remote record and
every skipped reset): a reset whose etcd reads timed out was never run again (the writer lost
its temp file), a reset gave way to a holder's newer change that was refused too (a name left
empty), and 5 immediate attempts of a rename all refused by other nodes' renames (EAGAIN). With
those fixed, 87 of 87 runs (seeds 400-486) agreed. The test still runs only when asked (random,
about 50 s): KVFS_STRESS=1 (ctest -R etcd_stalls). KVFS_STALL_SEED and KVFS_STALL_SECONDS vary
the run (defaults 1 and 20)."""

import errno
import hashlib
import os
import random
import threading
import time
import unittest

from kvfs_cluster import start_cluster

SEED = int(os.environ.get("KVFS_STALL_SEED", "1"))
SECONDS = float(os.environ.get("KVFS_STALL_SECONDS", "20"))
SETTLE_S = 30.0


def version(tag: str, size: int) -> bytes:
    """A file body that says who wrote it and whether it is whole."""
    rest = random.Random(tag).randbytes(size)
    return tag.encode().ljust(64, b" ") + hashlib.sha256(rest).hexdigest().encode() + rest


def whole(data: bytes) -> bool:
    return len(data) >= 128 and hashlib.sha256(data[128:]).hexdigest().encode() == data[64:128]


class EtcdStalls(unittest.TestCase):
    @unittest.skipUnless(os.environ.get("KVFS_STRESS") == "1", "a stress run: KVFS_STRESS=1")
    def test_nodes_agree_after_changes_under_etcd_stalls(self):
        c = start_cluster(self, n=3, replicas=2, lease_ttl_s=5)
        os.mkdir(c.path(1, "d"))
        for k in (2, 3):
            c.wait_exists(k, "d")
        stop = threading.Event()
        outcomes: dict[str, int] = {}
        failures: list[str] = []

        def count(what: str) -> None:
            outcomes[what] = outcomes.get(what, 0) + 1

        def worker(k: int, w: int) -> None:
            r = random.Random(SEED * 100 + k * 10 + w)
            seq = 0
            while not stop.is_set():
                seq += 1
                name = f"d/f{r.randrange(8)}"
                op = r.random()
                try:
                    if op < 0.6:
                        tmp = c.path(k, f"d/.tmp-{k}-{w}-{seq}")
                        with open(tmp, "wb") as f:
                            f.write(version(f"{k}-{w}-{seq}", r.choice([100, 70000, 1 << 20])))
                        os.rename(tmp, c.path(k, name))
                    elif op < 0.8:
                        os.unlink(c.path(k, name))
                    else:
                        os.rename(c.path(k, name), c.path(k, f"d/f{r.randrange(8)}"))
                    count("ok")
                except OSError as e:
                    count(errno.errorcode.get(e.errno, str(e.errno)))
                    if e.errno not in (errno.EROFS, errno.ENOENT):
                        failures.append(f"node {k}: {e}")
                    time.sleep(0.02)

        def staller() -> None:
            r = random.Random(SEED)
            first = True
            while not stop.wait(r.uniform(0, 2)):
                c.etcd.pause()
                # The first stall outlasts a request's 3 s timeout, so changes on their way
                # fail and later ones are refused up front whatever the seed (some seeds' stalls
                # were all shorter: nothing was refused, and nothing tested).
                stop.wait(4.0 if first else r.uniform(0, 4))
                first = False
                c.etcd.resume()

        threads = [threading.Thread(target=worker, args=(k, w)) for k in (1, 2, 3) for w in (0, 1)]
        threads.append(threading.Thread(target=staller))
        for t in threads:
            t.start()
        try:
            time.sleep(SECONDS)
        finally:
            stop.set()
            for t in threads:
                t.join()
            c.etcd.resume()
        self.assertEqual(failures, [])
        self.assertGreater(outcomes.get("ok", 0), 20, outcomes)
        self.assertGreater(outcomes.get("EROFS", 0), 0, f"etcd never stalled a change: {outcomes}")

        def view(k: int) -> dict:
            out = {}
            for n in sorted(os.listdir(c.path(k, "d"))):
                try:
                    with open(c.path(k, "d/" + n), "rb") as f:
                        data = f.read()
                    out[n] = (hashlib.sha256(data).hexdigest()[:16], whole(data),
                              data[:64].strip().decode())
                except OSError as e:
                    out[n] = ("unreadable", errno.errorcode.get(e.errno, str(e.errno)))
            return out

        deadline = time.monotonic() + SETTLE_S
        while True:
            views = {k: view(k) for k in (1, 2, 3)}
            if views[1] == views[2] == views[3] or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        differ = {n: {k: views[k].get(n) for k in views}
                  for n in set().union(*views.values())
                  if len({repr(views[k].get(n)) for k in views}) > 1}
        self.assertEqual(differ, {}, f"nodes disagree {SETTLE_S} s after etcd runs again "
                                     f"(seed {SEED}; changes: {outcomes})")
        # A temp file whose publish was refused keeps what it had: nothing.
        broken = {n: v for n, v in views[1].items()
                  if v[0] == "unreadable" or not (v[1] or n.startswith(".tmp-"))}
        self.assertEqual(broken, {}, "names without a whole version")


if __name__ == "__main__":
    unittest.main()
