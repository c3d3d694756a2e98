"""Defects a hostile user found (issue 11), each driven through a real mount.

Every test here failed on the code before its fix: the control file and status must survive
arbitrary bytes, open files must survive eviction, appends must land at the end, statvfs must
see an unlink at once, sparse files must cost what was written, and a write that cannot fit
must not empty the cache first.
"""

import errno
import json
import os
import subprocess
import time
import unittest

from kvfs_testlib import KvfsMount, chunk_bytes


def read_all(fd: int) -> bytes:
    out = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            return b"".join(out)
        out.append(b)


def ctl(m: KvfsMount, command: bytes) -> dict:
    fd = os.open(m.path(".kvfs", "ctl"), os.O_RDWR)
    try:
        os.write(fd, command)
        return json.loads(read_all(fd))
    finally:
        os.close(fd)


class ControlBytesTest(unittest.TestCase):
    """Item 1: no bytes written to .kvfs/ctl, and no mount point name, can kill the daemon."""

    def test_invalid_utf8_commands_get_a_json_error(self):
        with KvfsMount(capacity="64M") as m:
            for command in (b"sync\xff", b"\xff\xfe\xfd", b"status \xc3\x28", b"\x00\x01",
                            b"pin \xed\xa0\x80", bytes(range(256))):
                reply = ctl(m, command)
                self.assertIn("ok", reply, command)
            # The daemon still serves, and the one valid command among them works.
            self.assertTrue(ctl(m, b"sync")["ok"])
            self.assertEqual(m.status()["pid"], m.pid)
            reply = ctl(m, b"\xffbad")
            self.assertFalse(reply["ok"])
            self.assertEqual(reply["errno"], errno.EINVAL)
            self.assertIn("\ufffd", reply["error"])  # the bad byte, replaced, not dropped

    def test_status_with_a_non_utf8_mountpoint(self):
        with KvfsMount(capacity="64M", mnt_name=os.fsdecode(b"mnt-\xff\xfe")) as m:
            status = m.status()  # valid JSON, the name's bad bytes replaced
            self.assertIn("\ufffd", status["mountpoint"])
            r = m.kvfsctl("status", m.mnt)
            self.assertEqual(r.returncode, 0, r.stderr)
            r = m.kvfsctl("status", m.mnt, "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            json.loads(r.stdout)
            with open(m.path("f"), "wb") as f:
                f.write(b"still serving")
            with open(m.path("f"), "rb") as f:
                self.assertEqual(f.read(), b"still serving")



def evict(path: str) -> None:
    os.setxattr(path, "user.kvfs.evict", b"1")


class EvictOpenFileTest(unittest.TestCase):
    """Item 2: a file evicted while open keeps its size and every byte for its handles; its
    name goes away at once for everyone else."""

    def test_explicit_eviction_of_an_open_file(self):
        with KvfsMount(capacity="64M") as m:
            p = m.path("chunk")
            data = chunk_bytes("chunk", 6 << 20)
            with open(p, "wb") as f:
                f.write(data)
            fd = os.open(p, os.O_RDONLY)
            try:
                evict(p)
                self.assertEqual(os.fstat(fd).st_size, len(data))
                self.assertEqual(read_all(fd), data)
                self.assertEqual(os.pread(fd, 4096, 4096), data[4096:8192])
                with self.assertRaises(FileNotFoundError):
                    os.stat(p)
                with self.assertRaises(FileNotFoundError):
                    os.open(p, os.O_RDONLY)
            finally:
                os.close(fd)
            self.assertEqual(m.status()["evictions"], 1)

    def test_open_right_after_eviction_misses(self):
        with KvfsMount(capacity="64M") as m:
            for i in range(20):
                p = m.path(f"e{i}")
                with open(p, "wb") as f:
                    f.write(chunk_bytes(p, 1 << 20))
                os.stat(p)  # the kernel now caches the name
                evict(p)
                with self.assertRaises(FileNotFoundError, msg=f"round {i}"):
                    os.open(p, os.O_RDONLY)
                with self.assertRaises(FileNotFoundError, msg=f"round {i}"):
                    os.stat(p)

    def test_lru_eviction_under_a_reader(self):
        # A 64 MiB cache evicts the oldest files while a reader holds the first one open.
        with KvfsMount(capacity="64M") as m:
            first = m.path("first")
            data = chunk_bytes("first", 6 << 20)
            with open(first, "wb") as f:
                f.write(data)
            fd = os.open(first, os.O_RDONLY)
            try:
                got = os.read(fd, 1 << 20)
                for i in range(16):  # 96 MiB more: "first" is evicted on the way
                    with open(m.path(f"fill{i}"), "wb") as f:
                        f.write(chunk_bytes(f"fill{i}", 6 << 20))
                self.assertGreater(m.status()["evictions"], 0)
                self.assertFalse(os.path.exists(first))
                self.assertEqual(os.fstat(fd).st_size, len(data))
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                got += read_all(fd)
                self.assertEqual(got, data)
            finally:
                os.close(fd)


class UnlinkFreesSpaceTest(unittest.TestCase):
    """Item 4: statvfs counts an unlinked (or renamed-over) file's space free as soon as the
    call returns, as SGLang's HiCache evictor expects."""

    def check(self, durability: str):
        with KvfsMount(capacity="256M", extra_args=["--durability", durability]) as m:
            late = []
            for i in range(20):
                p = m.path(f"u{i}")
                with open(p, "wb") as f:
                    f.write(chunk_bytes(p, 4 << 20))
                time.sleep(0.01)  # let the kernel's release of the writer arrive
                os.stat(p)  # the kernel holds a lookup on it
                before = os.statvfs(m.mnt).f_bfree
                if i % 2:
                    os.unlink(p)
                else:
                    with open(m.path("other"), "wb") as f:
                        f.write(b"o")
                    os.rename(m.path("other"), p)
                freed = (os.statvfs(m.mnt).f_bfree - before) * 4096
                if freed < (4 << 20) - 4096:
                    late.append((i, freed))
            self.assertEqual(late, [])

    def test_close_durability(self):
        self.check("close")

    def test_async_durability(self):
        self.check("async")


class WriteLargerThanCacheTest(unittest.TestCase):
    """Item 9: a write that cannot fit fails with ENOSPC and evicts nothing."""

    def test_larger_than_the_whole_cache(self):
        with KvfsMount(capacity="64M") as m:
            names = [f"k{i}" for i in range(5)]
            for n in names:
                with open(m.path(n), "wb") as f:
                    f.write(chunk_bytes(n, 8 << 20))
            with self.assertRaises(OSError) as cm:
                with open(m.path("big"), "wb") as f:
                    for _ in range(100):
                        f.write(b"b" * (1 << 20))
            self.assertEqual(cm.exception.errno, errno.ENOSPC)
            self.assertEqual(m.status()["evictions"], 0)
            for n in names:
                with open(m.path(n), "rb") as f:
                    self.assertEqual(f.read(), chunk_bytes(n, 8 << 20), n)

    def test_larger_than_what_pinning_leaves(self):
        # Pinned files cannot make room: a file that fits the cache but not beside them fails
        # at close without evicting the unpinned ones either.
        with KvfsMount(capacity="64M") as m:
            for i in range(4):
                p = m.path(f"pinned{i}")
                with open(p, "wb") as f:
                    f.write(chunk_bytes(p, 10 << 20))
                os.setxattr(p, "user.kvfs.pin", b"1")
            with open(m.path("loose"), "wb") as f:
                f.write(chunk_bytes("loose", 8 << 20))
            with self.assertRaises(OSError) as cm:
                with open(m.path("big"), "wb") as f:
                    f.write(b"b" * (30 << 20))
            self.assertEqual(cm.exception.errno, errno.ENOSPC)
            self.assertEqual(m.status()["evictions"], 0)
            with open(m.path("loose"), "rb") as f:
                self.assertEqual(f.read(), chunk_bytes("loose", 8 << 20))

    def test_a_write_that_fits_still_evicts(self):
        with KvfsMount(capacity="64M") as m:
            for i in range(6):
                with open(m.path(f"old{i}"), "wb") as f:
                    f.write(chunk_bytes(f"old{i}", 8 << 20))
            data = chunk_bytes("new", 40 << 20)
            with open(m.path("new"), "wb") as f:
                f.write(data)
            with open(m.path("new"), "rb") as f:
                self.assertEqual(f.read(), data)
            self.assertGreater(m.status()["evictions"], 0)


if __name__ == "__main__":
    unittest.main()
