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
import threading
import time
import unittest

from kvfs_testlib import KvfsMount, chunk_bytes, write_file_atomic


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



class AppendTest(unittest.TestCase):
    """Item 3: O_APPEND lands at the end of the writer's content, whatever an old-version
    reader's short read did to the kernel's idea of the size."""

    def test_append_after_an_old_reader_hit_eof(self):
        with KvfsMount(capacity="64M") as m:
            p = m.path("a")
            with open(p, "wb") as f:
                f.write(b"x" * 8192)
            r = os.open(p, os.O_RDONLY)
            a = os.open(p, os.O_WRONLY | os.O_APPEND)
            try:
                os.write(a, b"y" * 100000)
                os.posix_fadvise(r, 0, 0, os.POSIX_FADV_DONTNEED)
                self.assertEqual(os.pread(r, 65536, 8192), b"")  # r reads its version
                os.write(a, b"z" * 4096)
                rw = os.open(p, os.O_RDWR)  # joins the writer: sees everything written
                try:
                    self.assertEqual(len(read_all(rw)), 8192 + 100000 + 4096)
                finally:
                    os.close(rw)
            finally:
                os.close(a)
                os.close(r)
            with open(p, "rb") as f:
                self.assertEqual(f.read(), b"x" * 8192 + b"y" * 100000 + b"z" * 4096)

    def test_two_appenders_never_overwrite_each_other(self):
        with KvfsMount(capacity="64M") as m:
            p = m.path("log")
            with open(p, "wb") as f:
                f.write(b"start\n")
            a = os.open(p, os.O_WRONLY | os.O_APPEND)
            b = os.open(p, os.O_WRONLY | os.O_APPEND)
            try:
                for i in range(50):
                    os.write(a if i % 2 else b, f"line {i:03d}\n".encode())
            finally:
                os.close(a)
                os.close(b)
            with open(p, "rb") as f:
                lines = f.read().split(b"\n")
            self.assertEqual(lines[0], b"start")
            self.assertEqual(sorted(lines[1:-1]), [f"line {i:03d}".encode() for i in range(50)])


def version_bytes(v: int) -> bytes:
    size = (1 << 20) + (v % 7) * 65536 + 123
    head = v.to_bytes(8, "little")
    return (head + chunk_bytes(f"v{v}", size))[:size]


class InPlaceRewriteTest(unittest.TestCase):
    """Item 10: readers that open a file while it is being rewritten in place with O_TRUNC get
    the old or the new complete version, never an empty, short or mixed one.

    The readers start once the writer has opened the file: a reader that opened with the page
    cache before the first in-place open is the case docs/fs.md says is not covered (the
    writer's writes move the kernel's one i_size under it)."""

    def run_rewrites(self, flags: int, seconds: float = 4.0, readers: int = 3):
        with KvfsMount(capacity="128M") as m:
            p = m.path("f")
            with open(p, "wb") as f:
                f.write(version_bytes(0))
            stop = time.monotonic() + seconds
            seen = {"complete": 0, "bad": []}
            lock = threading.Lock()
            rewriting = threading.Event()

            def writer():
                v = 1
                while time.monotonic() < stop:
                    data = version_bytes(v)
                    fd = os.open(p, os.O_WRONLY | flags)
                    rewriting.set()
                    try:
                        if not flags & os.O_TRUNC:
                            os.ftruncate(fd, 0)
                        for off in range(0, len(data), 1 << 18):
                            os.write(fd, data[off:off + (1 << 18)])
                    finally:
                        os.close(fd)
                    v += 1

            def reader():
                rewriting.wait()
                while time.monotonic() < stop:
                    with open(p, "rb") as f:
                        d = f.read()
                    ok = len(d) >= 8 and d == version_bytes(int.from_bytes(d[:8], "little"))
                    with lock:
                        if ok:
                            seen["complete"] += 1
                        else:
                            seen["bad"].append(len(d))

            threads = [threading.Thread(target=writer)]
            threads += [threading.Thread(target=reader) for _ in range(readers)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            self.assertGreater(seen["complete"], 100)
            self.assertEqual(seen["bad"], [], f"{len(seen['bad'])} reads saw no complete version")

    def test_o_trunc_rewrite_under_readers(self):
        self.run_rewrites(os.O_TRUNC)

    def test_ftruncate_rewrite_under_readers(self):
        self.run_rewrites(0)



def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def data_dir_bytes(m: KvfsMount) -> int:
    """Bytes of the journal and checkpoint files (not the preallocated device)."""
    total = 0
    for name in os.listdir(m.data):
        if name.startswith(("journal-", "checkpoint")):
            total += os.path.getsize(os.path.join(m.data, name))
    return total


class WriterThreadMemoryTest(unittest.TestCase):
    """Writes served by many FUSE threads leave the daemon small: each thread's io_uring holds
    no segment buffers it never used (it registered 16 of 1 MiB each, 16 MiB per thread)."""

    def test_many_writer_threads_do_not_grow_the_daemon(self):
        with KvfsMount(capacity="512M") as m:
            def publish(k):
                for i in range(8):
                    write_file_atomic(m.path(f"w{k}-{i}"), chunk_bytes(f"{k}-{i}", 256 << 10))
            publish(-1)  # warm-up: the daemon's start-up allocations are not the point
            before = rss_kib(m.pid)
            threads = [threading.Thread(target=publish, args=(k,)) for k in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            grown = rss_kib(m.pid) - before
            self.assertLess(grown, 24 * 1024, f"daemon RSS grew by {grown} KiB for 16 MiB of files")
            for k in range(8):
                with open(m.path(f"w{k}-7"), "rb") as f:
                    self.assertEqual(f.read(), chunk_bytes(f"{k}-7", 256 << 10))


class SparseFileTest(unittest.TestCase):
    """Item 5: a sparse file costs memory, journal and time by the data written, not its size."""

    TiB = 1 << 40

    def test_huge_sparse_files_cost_what_was_written(self):
        with KvfsMount(capacity="512M") as m:
            rss_before = rss_kib(m.pid)
            meta_before = data_dir_bytes(m)
            for i in range(5):
                p = m.path(f"sparse{i}")
                subprocess.run(["truncate", "-s", "8T", p], check=True)
                # One byte at the very end, and one in the middle: holes on both sides.
                with open(p, "r+b") as f:
                    f.seek(8 * self.TiB - 1)
                    f.write(b"E")
                    f.seek(3 * self.TiB + 12345)
                    f.write(b"middle")
            self.assertLess(rss_kib(m.pid) - rss_before, 64 * 1024, "daemon memory grew by size")
            self.assertLess(data_dir_bytes(m) - meta_before, 1 << 20, "journal grew by size")
            p = m.path("sparse3")
            st = os.stat(p)
            self.assertEqual(st.st_size, 8 * self.TiB)
            self.assertLess(st.st_blocks * 512, 8 << 20)  # du counts the two written segments
            with open(p, "rb") as f:
                f.seek(8 * self.TiB - 4096)
                self.assertEqual(f.read(), b"\0" * 4095 + b"E")
                f.seek(3 * self.TiB + 12345 - 10)
                self.assertEqual(f.read(26), b"\0" * 10 + b"middle" + b"\0" * 10)
                f.seek(5 * self.TiB)
                self.assertEqual(f.read(1 << 20), b"\0" * (1 << 20))
            r = m.kvfsctl("verify", p)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            # The holes survive a restart as holes, and the bytes as bytes.
            m.remount()
            self.assertLess(rss_kib(m.pid), 256 * 1024)
            with open(p, "rb") as f:
                f.seek(8 * self.TiB - 1)
                self.assertEqual(f.read(), b"E")
                f.seek(3 * self.TiB + 12345)
                self.assertEqual(f.read(6), b"middle")
            self.assertEqual(os.stat(m.path("sparse0")).st_size, 8 * self.TiB)

    def test_a_write_far_past_the_end_needs_only_its_own_space(self):
        # One byte at 2 GiB on a 128 MiB cache: the hole costs nothing, so it fits (pjdfstest
        # open/25 writes there; it failed with ENOSPC while the size was checked, not the data).
        with KvfsMount(capacity="128M") as m:
            p = m.path("far")
            fd = os.open(p, os.O_CREAT | os.O_WRONLY, 0o644)
            try:
                self.assertEqual(os.pwrite(fd, b"a", (2 << 30) + 1), 1)
            finally:
                os.close(fd)
            self.assertEqual(os.stat(p).st_size, (2 << 30) + 2)
            with open(p, "rb") as f:
                f.seek(2 << 30)
                self.assertEqual(f.read(), b"\0a")
            # Data that cannot fit still fails, before anything is evicted for it.
            fd = os.open(m.path("big"), os.O_CREAT | os.O_WRONLY, 0o644)
            chunk = b"x" * (1 << 20)
            with self.assertRaises(OSError) as ctx:
                for _ in range(200):
                    os.write(fd, chunk)
                os.close(fd)
                fd = -1
            self.assertEqual(ctx.exception.errno, errno.ENOSPC)
            if fd >= 0:
                with self.assertRaises(OSError):
                    os.close(fd)
            self.assertTrue(os.path.exists(p))

    def test_shrinking_a_sparse_file_and_growing_it_again(self):
        with KvfsMount(capacity="128M") as m:
            p = m.path("f")
            data = chunk_bytes("f", 3 << 20)
            with open(p, "wb") as f:
                f.write(data)
            os.truncate(p, 1 << 40)
            os.truncate(p, (2 << 20) + 5)  # cuts into the third segment
            os.truncate(p, 10 << 20)
            with open(p, "rb") as f:
                got = f.read()
            self.assertEqual(got, data[:(2 << 20) + 5] + b"\0" * ((10 << 20) - (2 << 20) - 5))


class HitRateTest(unittest.TestCase):
    """The hit rate kvfsctl status prints means what kvfsctl(8) says: reads of published files
    against names looked for and not found."""

    def test_known_hits_and_misses(self):
        with KvfsMount(capacity="64M") as m:
            for i in range(5):  # publishing (temp file + rename) is neither a hit nor a miss
                write_file_atomic(m.path(f"c{i}"), chunk_bytes(f"c{i}", 4096))
            base = m.status()
            self.assertEqual(base["misses"], 0)
            self.assertEqual(base["hits"], 0)
            for i in range(3):
                self.assertFalse(os.path.exists(m.path(f"absent{i}")))
            for i in range(5):
                with open(m.path(f"c{i}"), "rb") as f:
                    f.read()
            with open(m.path("c0"), "rb") as f:  # a second read is a second hit
                f.read()
            s = m.status()
            self.assertEqual(s["misses"] - base["misses"], 3)
            self.assertEqual(s["hits"] - base["hits"], 6)
            r = m.kvfsctl("status", m.mnt)
            self.assertIn("hit rate      66.7% (6 hits", r.stdout)


if __name__ == "__main__":
    unittest.main()
