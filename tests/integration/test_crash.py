"""kill -9 crash test: a writer publishes files (temp + rename, content derived from the name)
in a loop while the kvfs daemon is SIGKILLed at a random moment; after remounting, every visible
file must be complete and byte-exact, temp files too (complete or absent), and carry the user
xattr its writer set before its first close (one set after the rename may be there or not). With
durability=close, every file whose rename returned before the kill must be there.

The random kill points come from a seed printed on failure; set KVFS_CRASH_SEED to replay one.
"""

import os
import random
import subprocess
import sys
import time
import unittest

from crash_writer import size_for
from kvfs_testlib import KvfsMount, chunk_bytes

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_FILES_PER_ROUND = 80


class CrashKill9(unittest.TestCase):
    def run_rounds(self, durability, rounds):
        seed = int(os.environ.get("KVFS_CRASH_SEED", time.time_ns() % 1_000_000))
        rng = random.Random(seed)
        with KvfsMount(capacity="1G", extra_args=("--durability", durability)) as m:
            log_path = os.path.join(m.root, "published.log")
            published = set()
            for rnd in range(rounds):
                where = f"seed {seed}, round {rnd}, durability={durability}"
                os.makedirs(m.path("crash"), exist_ok=True)
                writer = subprocess.Popen(
                    [sys.executable, os.path.join(HERE, "crash_writer.py"), m.path("crash"),
                     str(rnd), log_path, str(MAX_FILES_PER_ROUND)],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE, text=True)
                try:
                    # Kill once the writer is busy: after a random number of its publishes and
                    # a random extra pause, so the kill lands anywhere in write/close/rename.
                    want = rng.randint(1, 30)
                    deadline = time.monotonic() + 30
                    while (self._count(log_path, rnd) < want and writer.poll() is None
                           and time.monotonic() < deadline):
                        time.sleep(0.005)
                    time.sleep(rng.uniform(0, 0.2))
                    # The dead mount stays until the restart (which detaches it), as after a
                    # real crash: the writer's next call fails ENOTCONN. Detached at once, a
                    # writer that made no call in between went on in the directory under it.
                    m.kill9(detach=False)
                finally:
                    try:
                        _, err = writer.communicate(timeout=30)
                    except subprocess.TimeoutExpired:
                        writer.kill()
                        _, err = writer.communicate()
                        self.fail(f"{where}: writer hung after the daemon was killed")
                self.assertEqual(writer.returncode, 0, f"{where}: writer failed: {err}")
                with open(log_path) as f:
                    for line in f:
                        if not line.startswith("#"):
                            published.add(line.strip())
                m.start()
                found, temps = self.verify(m, published if durability == "close" else set(),
                                           where)
                print(f"{where}: kill after {want} publishes; {len(published)} renames "
                      f"returned so far, {len(found)} files and {temps} temp files after "
                      f"restart", file=sys.stderr)
            # The recovered store keeps working: publish and read one more file.
            path = m.path("crash", "after")
            with open(path, "wb") as f:
                f.write(chunk_bytes("after", 3 << 20))
            m.remount()
            with open(path, "rb") as f:
                self.assertEqual(f.read(), chunk_bytes("after", 3 << 20))
            self.assertGreater(len(published), 0)

    @staticmethod
    def _count(log_path, rnd):
        try:
            with open(log_path) as f:
                return sum(1 for line in f if f"r{rnd}-" in line)
        except FileNotFoundError:
            return 0

    def verify(self, m, must_exist, where):
        root = m.path("crash")
        found = set()
        temps = 0
        for dirpath, dirnames, filenames in os.walk(root):
            for d in dirnames:
                self.assertTrue(d == ".staging" or len(d) == 1, f"{where}: unexpected dir {d}")
            for fn in filenames:
                path = os.path.join(dirpath, fn)
                rel = os.path.relpath(path, root)
                name = fn[:-4] if fn.endswith(".tmp") else fn
                self.assertRegex(name, r"^r\d+-\d{4}$", f"{where}: unexpected file {rel}")
                size = size_for(name)
                st = os.stat(path)
                self.assertEqual(st.st_size, size,
                                 f"{where}: {rel} has {st.st_size} bytes, expected {size}")
                with open(path, "rb") as f:
                    data = f.read()
                self.assertEqual(len(data), size, f"{where}: {rel}: short read")
                if data != chunk_bytes(name, size):
                    bad = next(i for i in range(size) if data[i] != chunk_bytes(name, size)[i])
                    self.fail(f"{where}: {rel}: wrong content from byte {bad} of {size}")
                self.assertEqual(os.getxattr(path, "user.name"), name.encode(),
                                 f"{where}: {rel}: the xattr set before its publish")
                if "user.after" in os.listxattr(path):
                    self.assertEqual(os.getxattr(path, "user.after"), name.encode(), rel)
                if fn.endswith(".tmp"):
                    temps += 1
                else:
                    found.add(rel)
        missing = sorted(must_exist - found)
        self.assertEqual(missing, [], f"{where}: published before the kill but missing after "
                                      f"restart: {missing[:10]}\n{m.log_tail()}")
        return found, temps

    def test_kill9_durability_close(self):
        self.run_rounds("close", rounds=4)

    def test_kill9_durability_async(self):
        self.run_rounds("async", rounds=3)

# Makes files and hard links to them and unlinks names at random, logging each call that
# returned ("C name", "L src dst", "U name") and each unlink it is about to make ("u name"):
# the daemon may die inside that call, so it may or may not have happened.
LINK_WRITER = r"""
import os, random, sys
root, seed, log = sys.argv[1], int(sys.argv[2]), open(sys.argv[3], "a")
rng, i, made = random.Random(seed), 0, []
while True:
    i += 1
    src = "f%d" % rng.randrange(12)
    try:
        if rng.random() < 0.3:
            victim = rng.choice(made) if made and rng.random() < 0.7 else src
            log.write("u %s\n" % victim)  # intent: the kill may land inside the call
            log.flush()
            os.unlink(os.path.join(root, victim))
            log.write("U %s\n" % victim)
        else:
            fd = os.open(os.path.join(root, src), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            os.write(fd, src.encode() * 1000)
            os.close(fd)
            log.write("C %s\n" % src)
    except FileExistsError:
        dst = "l%d-%d" % (seed, i)
        os.link(os.path.join(root, src), os.path.join(root, dst))
        made.append(dst)
        log.write("L %s %s\n" % (src, dst))
    except FileNotFoundError:
        pass
    log.flush()
"""


def _reap(proc):
    """Kills proc (by its PID) if it still runs, and waits for it."""
    if proc.poll() is None:
        proc.kill()
    proc.wait()


class CrashLinks(unittest.TestCase):
    """kill -9 while hard links are made and names unlinked (durability=close): after the
    restart every name whose link returned is there unless its unlink returned, every name whose
    unlink returned is gone, each inode's link count is its number of names, and every name of
    an inode reads the same, complete content."""

    def test_kill9_while_linking(self):
        seed = int(os.environ.get("KVFS_CRASH_SEED", time.time_ns() % 1_000_000))
        rng = random.Random(seed)
        with KvfsMount(capacity="256M") as m:
            root = m.path("links")
            os.mkdir(root)
            log_path = os.path.join(m.root, "links.log")
            for rnd in range(4):
                where = f"seed {seed}, round {rnd}"
                writer = subprocess.Popen(
                    [sys.executable, "-c", LINK_WRITER, root, str(rnd), log_path],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)
                self.addCleanup(_reap, writer)  # whatever fails below, it is not left running
                time.sleep(rng.uniform(0.1, 0.6))
                # The dead mount stays until the restart detaches it: the writer's next call
                # fails ENOTCONN. Detached at once (kill9's default), a writer that made no call
                # before the detach (a loaded machine) found no directory there and, taking
                # that for an unlinked name, looped for ever.
                m.kill9(detach=False)
                try:
                    writer.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.fail(f"{where}: the writer did not stop after the daemon was killed")
                m.start()
                # name -> True: must exist, False: must be gone, None: either (an unlink
                # was under way when the daemon died).
                names = {}
                with open(log_path) as f:
                    for line in f:
                        op, *args = line.split()
                        if op == "L":
                            names[args[1]] = True
                        elif op == "U":
                            names[args[0]] = False
                        elif op == "u":
                            names[args[0]] = None
                        else:
                            names[args[0]] = True
                by_ino = {}
                for n in os.listdir(root):
                    st = os.lstat(os.path.join(root, n))
                    by_ino.setdefault(st.st_ino, []).append((n, st.st_nlink))
                present = {n for v in by_ino.values() for n, _ in v}
                # A name's latest logged call decides, except a file name re-created after its
                # unlink by a call that had not returned: only "must exist" is strict.
                lost = sorted(n for n, alive in names.items() if alive is True
                              and n not in present and not n.startswith("f"))
                self.assertEqual(lost, [], f"{where}: links acknowledged but gone")
                back = sorted(n for n, alive in names.items() if alive is False and n in present
                              and not n.startswith("f"))
                self.assertEqual(back, [], f"{where}: unlinked names came back")
                for ino, entries in by_ino.items():
                    self.assertTrue(all(nl == len(entries) for _, nl in entries),
                                    f"{where}: link count of {entries}")
                    contents = set()
                    for n, _ in entries:
                        with open(os.path.join(root, n), "rb") as f:
                            contents.add(f.read())
                    self.assertEqual(len(contents), 1, f"{where}: names of one inode differ")
                    data = contents.pop()
                    self.assertEqual(len(data) % 1000, 0, f"{where}: {entries}: partial content")


if __name__ == "__main__":
    unittest.main()
