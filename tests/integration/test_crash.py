"""kill -9 crash test: a writer publishes files (temp + rename, content derived from the name)
in a loop while the kvfs daemon is SIGKILLed at a random moment; after remounting, every visible
file must be complete and byte-exact, temp files too (complete or absent). With
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
                    m.kill9()
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


if __name__ == "__main__":
    unittest.main()
