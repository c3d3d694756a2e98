"""A damaged or full disk under a real mount (issue 11's hostile user): one flipped bit in the
journal, the newest checkpoint or the superblock costs at most what it held and is reported; a
full file system makes the store read-only until there is room again, and a restart on one
works.
"""

import errno
import os
import re
import subprocess
import tempfile
import time
import unittest

from kvfs_testlib import KvfsError, KvfsMount, chunk_bytes, write_file_atomic


def flip_bit(path: str, offset: int, bit: int = 3) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ (1 << bit)]))


def files_in(m: KvfsMount, prefix: str) -> list:
    return sorted(n for n in os.listdir(m.mnt) if n.startswith(prefix))


class JournalDamageTest(unittest.TestCase):
    """Item 6: one flipped bit in the middle of the journal loses at most the change that
    record held, and says so in the log, the status and kvfsctl verify."""

    def test_bit_flip_in_the_middle_of_the_journal(self):
        with KvfsMount(capacity="128M", extra_args=["--durability", "close"]) as m:
            names = [f"chunk{i:02d}" for i in range(30)]
            for n in names:
                write_file_atomic(m.path(n), chunk_bytes(n, 64 * 1024))
            m.kill9()
            journals = sorted(f for f in os.listdir(m.data) if f.startswith("journal-"))
            journal = os.path.join(m.data, journals[-1])
            flip_bit(journal, os.path.getsize(journal) // 2)
            m.start()
            present = files_in(m, "chunk")
            # A damaged rename leaves its file under the temp name: that name is the change lost.
            self.assertGreaterEqual(len([n for n in present if ".tmp" not in n]), 29, present)
            for n in present:
                with open(m.path(n), "rb") as f:
                    self.assertEqual(f.read(), chunk_bytes(n.split(".tmp")[0], 64 * 1024), n)
            status = m.status()
            self.assertEqual(status["recovery_damaged_records"], 1)
            self.assertTrue(any("damaged" in note for note in status["recovery_notes"]))
            r = m.kvfsctl("verify", m.mnt)
            self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
            self.assertIn("DAMAGE", r.stdout)
            r = m.kvfsctl("status", m.mnt)
            self.assertIn("DAMAGE", r.stdout)
            self.assertIn("damaged", m.log_tail(20000))
            # The start wrote a checkpoint of what it recovered: the next start is clean.
            m.remount()
            self.assertEqual(files_in(m, "chunk"), present)
            self.assertEqual(m.status()["recovery_damaged_records"], 0)
            self.assertEqual(m.kvfsctl("verify", m.mnt).returncode, 0)


class CheckpointAndSuperblockDamageTest(unittest.TestCase):
    """Item 7: a flipped bit in the checkpoint or the superblock no longer stops the start."""

    def publish_two_generations(self, m: KvfsMount) -> list:
        names = []
        for gen in range(2):  # each clean stop writes a checkpoint
            for i in range(10):
                n = f"g{gen}-{i}"
                write_file_atomic(m.path(n), chunk_bytes(n, 100 * 1024))
                names.append(n)
            m.unmount()
            m.start()
        m.unmount()
        return names

    def check_all(self, m: KvfsMount, names: list) -> None:
        self.assertEqual(files_in(m, "g"), sorted(names))
        for n in names:
            with open(m.path(n), "rb") as f:
                self.assertEqual(f.read(), chunk_bytes(n, 100 * 1024), n)

    def test_bit_flip_in_the_newest_checkpoint(self):
        with KvfsMount(capacity="128M") as m:
            names = self.publish_two_generations(m)
            checkpoints = sorted(f for f in os.listdir(m.data) if f.startswith("checkpoint-"))
            self.assertEqual(len(checkpoints), 2, os.listdir(m.data))
            newest = os.path.join(m.data, checkpoints[-1])
            flip_bit(newest, os.path.getsize(newest) // 2)
            m.start()
            self.check_all(m, names)
            self.assertEqual(m.status()["recovery_damaged_checkpoints"], 1)
            self.assertEqual(m.kvfsctl("verify", m.mnt).returncode, 1)
            m.remount()
            self.check_all(m, names)
            self.assertEqual(m.status()["recovery_damaged_checkpoints"], 0)

    def test_bit_flips_in_both_checkpoints_lose_only_what_neither_holds(self):
        # A checkpoint had one checksum over all its records: one flipped bit in each of the
        # two kept checkpoints lost every file they described. Each block of about 4 KiB of
        # records now verifies on its own, and what one checkpoint lost is taken from the
        # other (a clean stop writes two alike) and the journals.
        with KvfsMount(capacity="128M") as m:
            names = {}
            for i in range(300):
                n = f"g-{i:03d}"
                names[n] = chunk_bytes(n, 4096)
                write_file_atomic(m.path(n), names[n])

            def flip_both_and_start(fractions):
                m.unmount()
                checkpoints = sorted(
                    f for f in os.listdir(m.data) if f.startswith("checkpoint-"))
                self.assertEqual(len(checkpoints), 2, os.listdir(m.data))
                for c, fraction in zip(checkpoints, fractions):
                    path = os.path.join(m.data, c)
                    flip_bit(path, int(os.path.getsize(path) * fraction))
                m.start()
                status = m.status()
                self.assertEqual(status["recovery_damaged_checkpoints"], 2)
                notes = " ".join(status["recovery_notes"])
                lost = re.search(r"(\d+) are lost", notes)
                self.assertIsNotNone(lost, notes)
                present = files_in(m, "g")
                for n in present:
                    with open(m.path(n), "rb") as f:
                        self.assertEqual(f.read(), names[n], n)
                missing = sorted(set(names) - set(present))
                self.assertEqual(len(missing), int(lost.group(1)), notes)
                self.assertEqual(m.kvfsctl("verify", m.mnt).returncode, 1)
                return missing

            # Different blocks hit: nothing is lost.
            self.assertEqual(flip_both_and_start([1 / 3, 2 / 3]), [])
            # The same block hit in both: its records (at most about 4 KiB of them) are lost,
            # and counted.
            missing = flip_both_and_start([1 / 2, 1 / 2])
            self.assertGreater(len(missing), 0)
            self.assertLess(len(missing), 60, missing)
            for n in missing:
                del names[n]
            m.remount()
            self.assertEqual(files_in(m, "g"), sorted(names))
            self.assertEqual(m.status()["recovery_damaged_checkpoints"], 0)

    def test_bit_flip_in_the_superblock(self):
        with KvfsMount(capacity="128M") as m:
            names = self.publish_two_generations(m)
            device = os.path.join(m.data, "device0.kvfs")
            flip_bit(device, 20)  # inside the encoded superblock
            m.start()
            self.check_all(m, names)
            self.assertEqual(m.status()["recovery_repaired_superblocks"], 1)
            self.assertIn("backup", m.log_tail(20000))
            m.remount()  # the first copy was rewritten
            self.check_all(m, names)
            self.assertEqual(m.status()["recovery_repaired_superblocks"], 0)

    def test_a_truncated_device_names_the_way_back_and_keeps_what_it_still_holds(self):
        # A device file cut short behind kvfs's back stopped the start with "smaller than its
        # superblock says" and no way on but deleting the cache. The refusal stays (the cut
        # may be a mistake to undo) but says how to start with what the device still holds.
        size = 4 << 20
        with KvfsMount(capacity="64M") as m:
            names = [f"t{i}" for i in range(8)]
            for n in names:
                write_file_atomic(m.path(n), chunk_bytes(n, size))
            m.unmount()
            device = os.path.join(m.data, "device0.kvfs")
            full = os.path.getsize(device)
            os.truncate(device, 16 << 20)
            with self.assertRaises(KvfsError):
                m.start()
            log = m.log_tail(20000)
            self.assertIn(f"truncate -s {full} {device}", log)
            subprocess.run(["truncate", "-s", str(full), device], check=True)
            m.start()
            kept, lost = [], []
            for n in names:
                try:
                    with open(m.path(n), "rb") as f:
                        self.assertTrue(f.read() == chunk_bytes(n, size), f"{n}: other bytes")
                    kept.append(n)
                except OSError as e:
                    self.assertEqual(e.errno, errno.EIO, n)
                    lost.append(n)
            self.assertTrue(kept and lost, (kept, lost))
            self.assertGreaterEqual(m.status()["corrupt_dropped"], len(lost))
            self.assertEqual(files_in(m, "t"), kept)  # the lost ones are dropped


def fill(directory: str) -> str:
    """Writes a file into `directory` until its file system is full; returns its path."""
    filler = os.path.join(directory, "filler")
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
    return filler


class FullDataDirectoryTest(unittest.TestCase):
    """Item 8: a data directory whose file system filled up while kvfs ran still restarts,
    with every acknowledged file; and the store it made read-only takes changes again by
    itself once there is room."""

    def small_data_mount(self, size: str) -> KvfsMount:
        """A mount whose journal and checkpoints are on a tmpfs of `size`, its device beside
        it (not started)."""
        small = tempfile.mkdtemp(prefix="kvfs-small-")
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", small],
                           capture_output=True, text=True)
        if r.returncode != 0:
            os.rmdir(small)
            self.skipTest(f"cannot mount a small tmpfs for the data directory: {r.stderr.strip()}")

        def unmount():
            subprocess.run(["umount", "-l", small], capture_output=True)
            os.rmdir(small)
        self.addCleanup(unmount)  # first registered: runs after the mount's cleanup
        m = KvfsMount(capacity=None)
        self.addCleanup(m.cleanup)
        self.small = small
        m.extra_args = ["--data", os.path.join(small, "data"),
                        "--device", os.path.join(m.root, "device0.kvfs") + ":128M"]
        m.command = lambda: ([m.kvfs_bin, m.mnt] + m.extra_args + ["-f"])
        return m

    def test_a_store_read_only_from_a_full_file_system_resumes_once_there_is_room(self):
        # 8 MiB: too small for the journal's reserved blocks, so its appends need free blocks
        # and the store turns read-only a few publishes after the file system fills.
        m = self.small_data_mount("8m")
        size = 64 * 1024
        with m:
            for i in range(5):
                write_file_atomic(m.path(f"before{i}"), chunk_bytes(f"b{i}", size))
            filler = fill(self.small)
            published, refused = [], []
            for i in range(2000):
                try:
                    write_file_atomic(m.path(f"full{i}"), chunk_bytes(f"f{i}", size))
                    published.append(i)
                except OSError as e:
                    self.assertEqual(e.errno, errno.EROFS, e)
                    refused.append(i)
                    if len(refused) == 3:
                        break
            self.assertEqual(len(refused), 3, "the journal never filled")
            why = m.status()["read_only"]
            self.assertIn("once the file system", why)
            self.assertIn("READ-ONLY", m.kvfsctl("status", m.mnt).stdout)
            with open(m.path("before0"), "rb") as f:  # reads go on
                self.assertEqual(f.read(), chunk_bytes("b0", size))
            # A connector retrying against it gets EROFS each time, and the log a few lines,
            # not one per failure (it may be on the very disk that is full).
            t0 = time.monotonic()
            for i in range(300):
                with self.assertRaises(OSError) as e:
                    write_file_atomic(m.path(f"retry{i}"), b"x")
                self.assertEqual(e.exception.errno, errno.EROFS)
            windows = int((time.monotonic() - t0) // 10) + 2  # 20 lines per 10 s at most
            failures = [line for line in m.log_tail(1 << 20).splitlines() if "read-only" in line]
            self.assertLess(len(failures), 20 * windows + 10, "\n".join(failures[-5:]))

            os.unlink(filler)

            def publishes():
                try:
                    write_file_atomic(m.path("after"), chunk_bytes("after", size),
                                      tmp_suffix=".tmp-after")
                    return True
                except OSError as e:
                    self.assertEqual(e.errno, errno.EROFS, e)
                    return False
            deadline = time.monotonic() + 20
            while not publishes():
                self.assertLess(time.monotonic(), deadline, "still read-only 20 s after room")
                time.sleep(0.2)
            self.assertEqual(m.status()["read_only"], "")
            self.assertNotIn("READ-ONLY", m.kvfsctl("status", m.mnt).stdout)
            self.assertIn("writable again", m.log_tail(20000))

            m.remount()  # what it took after resuming is durable; what it refused is not there
            for i in range(5):
                with open(m.path(f"before{i}"), "rb") as f:
                    self.assertEqual(f.read(), chunk_bytes(f"b{i}", size))
            for i in published:
                with open(m.path(f"full{i}"), "rb") as f:
                    self.assertEqual(f.read(), chunk_bytes(f"f{i}", size))
            for i in refused:
                self.assertFalse(os.path.exists(m.path(f"full{i}")))
            with open(m.path("after"), "rb") as f:
                self.assertEqual(f.read(), chunk_bytes("after", size))

    def test_restart_on_a_full_file_system(self):
        m = self.small_data_mount("40m")
        with m:
            for i in range(10):
                write_file_atomic(m.path(f"before{i}"), chunk_bytes(f"b{i}", 256 * 1024))
            filler = fill(self.small)
            # Still serving, and appends go into the journal's reserved space.
            for i in range(10):
                write_file_atomic(m.path(f"full{i}"), chunk_bytes(f"f{i}", 256 * 1024))
            m.unmount()  # its final checkpoint does not fit: fine
            m.start()
            for i in range(10):
                with open(m.path(f"before{i}"), "rb") as f:
                    self.assertEqual(f.read(), chunk_bytes(f"b{i}", 256 * 1024))
                with open(m.path(f"full{i}"), "rb") as f:
                    self.assertEqual(f.read(), chunk_bytes(f"f{i}", 256 * 1024))
            os.unlink(filler)


def unmount_when_free(top: str) -> None:
    """umount, retried for a while: right after a kvfs daemon exits its file system is still
    busy for a moment (a umount at once failed with EBUSY in most runs here; the daemon's
    io_uring lets go of its files in a kernel worker)."""
    deadline = time.monotonic() + 20
    while True:
        r = subprocess.run(["umount", top], capture_output=True, text=True)
        if r.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    if r.returncode != 0:
        subprocess.run(["umount", "-l", top], capture_output=True)


class CapacityLargerThanTheDiskTest(unittest.TestCase):
    """A capacity the data directory's file system cannot hold is refused at start, before it
    takes any room: ext4 keeps the blocks of a fallocate that runs out of space, so trying
    filled the operator's disk and left a device file that kept it full."""

    def small_ext4(self) -> str:
        """A 64 MiB ext4 on a loop device (skips where this machine cannot make one)."""
        work = tempfile.mkdtemp(prefix="kvfs-ext4-")
        self.addCleanup(os.rmdir, work)
        image, top = os.path.join(work, "image"), os.path.join(work, "fs")
        os.mkdir(top)
        self.addCleanup(os.rmdir, top)
        with open(image, "wb") as f:
            f.truncate(64 << 20)
        self.addCleanup(os.unlink, image)
        for cmd in (["mkfs.ext4", "-q", image], ["mount", "-o", "loop", image, top]):
            try:
                r = subprocess.run(cmd, capture_output=True, text=True)
            except FileNotFoundError as e:
                self.skipTest(f"cannot make a small ext4: {e}")
            if r.returncode != 0:
                self.skipTest(f"cannot make a small ext4 ({' '.join(cmd[:2])}): {r.stderr.strip()}")
        self.addCleanup(unmount_when_free, top)
        return top

    def test_a_capacity_larger_than_the_disk_is_refused_before_it_fills_the_disk(self):
        top = self.small_ext4()
        free_before = os.statvfs(top).f_bavail
        m = KvfsMount(capacity=None)
        self.addCleanup(m.cleanup)
        data = os.path.join(top, "data")
        r = subprocess.run([m.kvfs_bin, m.mnt, "--data", data, "--capacity", "1G", "-f"],
                           capture_output=True, text=True, timeout=60)
        self.assertNotEqual(r.returncode, 0, r.stderr)
        self.assertFalse(os.path.exists(os.path.join(data, "device0.kvfs")))
        # The disk keeps its room (a few blocks for the data directory and its lock file).
        self.assertGreater(os.statvfs(top).f_bavail, free_before - 64)
        self.assertIn("free", r.stderr)
        self.assertIn("--capacity", r.stderr)

        # A capacity that fits starts, on the same data directory.
        m.command = lambda: [m.kvfs_bin, m.mnt, "--data", data, "--capacity", "16M", "-f"]
        with m:
            write_file_atomic(m.path("a"), chunk_bytes("a", 1 << 20))
            with open(m.path("a"), "rb") as f:
                self.assertEqual(f.read(), chunk_bytes("a", 1 << 20))


if __name__ == "__main__":
    unittest.main()
