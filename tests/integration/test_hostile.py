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


if __name__ == "__main__":
    unittest.main()
