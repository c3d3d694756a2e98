"""Who may use a kvfs mount: another uid (65534, as an inference container running as its own
user would be) is refused by the kernel without -o allow_other, may use the mount with it, and
always meets the kernel's mode checks, because kvfs mounts with default_permissions (it does no
permission checks of its own). The other uid runs under setpriv(1) from util-linux."""

import hashlib
import os
import shutil
import subprocess
import sys
import unittest

from kvfs_testlib import KvfsMount, chunk_bytes, write_file_atomic

MiB = 1024 * 1024
NOBODY = 65534

# Runs as the other uid: one operation on one path, prints "ok [detail]" or the errno's name.
PROBE = r"""
import errno, hashlib, os, sys
op, path = sys.argv[1], sys.argv[2]
try:
    if op == "stat":
        st = os.stat(path)
        print("ok", st.st_uid)
    elif op == "read":
        with open(path, "rb") as f:
            print("ok", hashlib.sha256(f.read()).hexdigest())
    elif op == "list":
        print("ok", ",".join(sorted(os.listdir(path))))
    elif op == "create":
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, b"from nobody")
        os.close(fd)
        print("ok")
    elif op == "chmod600":
        os.chmod(path, 0o600)
        print("ok")
    elif op == "unlink":
        os.unlink(path)
        print("ok")
    elif op in ("pwrite", "append", "direct"):
        flags = os.O_WRONLY | {"pwrite": 0, "append": os.O_APPEND, "direct": os.O_DIRECT}[op]
        fd = os.open(path, flags)
        if op == "direct":  # an aligned buffer
            import mmap
            buf = mmap.mmap(-1, 4096)
            buf.write(b"d" * 4096)
            os.pwrite(fd, buf, 0)
        else:
            os.pwrite(fd, b"x", 0) if op == "pwrite" else os.write(fd, b"x")
        os.close(fd)
        print("ok")
    elif op == "truncate":
        os.truncate(path, 1)
        print("ok")
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
"""


def as_nobody(op, path, uid=NOBODY, groups=None):
    """Runs the probe as uid (default: nobody), its gid the same number, with supplementary
    groups `groups` (default: none)."""
    group_args = ["--groups", ",".join(map(str, groups))] if groups else ["--clear-groups"]
    r = subprocess.run(["setpriv", "--reuid", str(uid), "--regid", str(uid), *group_args,
                        sys.executable, "-c", PROBE, op, path],
                       capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    if r.returncode != 0:
        raise AssertionError(f"probe failed ({r.returncode}): {r.stderr}")
    return r.stdout.strip()


def sha(data):
    return hashlib.sha256(data).hexdigest()


def super_options(mnt):
    real = os.path.realpath(mnt)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            if left.split()[4] == real:
                return right.split()[2].split(",")
    return []


class OtherUid(unittest.TestCase):
    def setUp(self):
        if os.geteuid() != 0:
            self.skipTest("needs root: mounts and switches to uid 65534")
        if not shutil.which("setpriv"):
            self.skipTest("setpriv (util-linux) is not installed")

    def mount(self, *fuse_options):
        extra = []
        for o in fuse_options:
            extra += ["-o", o]
        m = KvfsMount(capacity="128M", extra_args=extra)
        # The temp root is 0700: open it so that an EACCES can only come from the mount.
        os.chmod(m.root, 0o755)
        m.__enter__()
        self.addCleanup(m.cleanup)
        self.assertEqual(as_nobody("stat", m.root), "ok 0")
        return m

    def publish(self, m, name, mode, size=MiB):
        data = chunk_bytes(name, size)
        write_file_atomic(m.path(name), data)
        os.chmod(m.path(name), mode)
        return data

    def test_refused_without_allow_other(self):
        m = self.mount()
        data = self.publish(m, "public", 0o644)
        self.assertNotIn("allow_other", super_options(m.mnt))
        # The kernel turns the other uid away before kvfs sees a request, even for a 0644 file.
        self.assertEqual(as_nobody("stat", m.mnt), "EACCES")
        self.assertEqual(as_nobody("list", m.mnt), "EACCES")
        self.assertEqual(as_nobody("read", m.path("public")), "EACCES")
        self.assertEqual(as_nobody("create", m.path("mine")), "EACCES")
        with open(m.path("public"), "rb") as f:  # the owner still can
            self.assertEqual(f.read(), data)

    def test_allow_other_reads_and_mode_checks(self):
        m = self.mount("allow_other")
        public = self.publish(m, "public", 0o644)
        self.publish(m, "secret", 0o600)
        sopts = super_options(m.mnt)
        self.assertIn("allow_other", sopts)
        self.assertIn("default_permissions", sopts, "kvfs always mounts with it")
        self.assertEqual(as_nobody("list", m.mnt), "ok public,secret")
        self.assertEqual(as_nobody("read", m.path("public")), "ok " + sha(public))
        # default_permissions is implied: mode bits hold without asking for them
        self.assertEqual(as_nobody("read", m.path("secret")), "EACCES")
        self.assertEqual(as_nobody("create", m.path("mine")), "EACCES")  # root dir is 0755
        self.assertEqual(as_nobody("unlink", m.path("public")), "EACCES")
        self.assertTrue(os.path.exists(m.path("public")))

    def test_allow_other_default_permissions(self):
        m = self.mount("allow_other,default_permissions")
        public = self.publish(m, "public", 0o644)
        secret = self.publish(m, "secret", 0o600)
        self.assertEqual(as_nobody("read", m.path("public")), "ok " + sha(public))
        self.assertEqual(as_nobody("read", m.path("secret")), "EACCES")
        # A shared directory: the other uid publishes its own file, owned by it.
        shared = m.path("shared")
        os.mkdir(shared)
        os.chmod(shared, 0o1777)
        mine = os.path.join(shared, "mine")
        self.assertEqual(as_nobody("create", mine), "ok")
        self.assertEqual(os.stat(mine).st_uid, NOBODY)
        self.assertEqual(as_nobody("chmod600", mine), "ok")
        self.assertEqual(os.stat(mine).st_mode & 0o777, 0o600)
        with open(mine, "rb") as f:  # root passes mode checks
            self.assertEqual(f.read(), b"from nobody")
        with open(m.path("secret"), "rb") as f:
            self.assertEqual(f.read(), secret)
        # Sticky directory: nobody may not remove root's file in it, only its own.
        write_file_atomic(os.path.join(shared, "roots"), b"root's")
        self.assertEqual(as_nobody("unlink", os.path.join(shared, "roots")), "EPERM")
        self.assertEqual(as_nobody("unlink", mine), "ok")

    def test_writes_by_another_uid_drop_set_id_bits(self):
        """A write or truncate by a caller without CAP_FSETID drops S_ISUID, and S_ISGID where
        the VFS does (with S_IXGRP, or for a caller outside the file's group), as on ext4;
        the kernel does it for writes through the page cache only, kvfs for the rest."""
        m = self.mount("allow_other")
        os.chmod(m.mnt, 0o777)
        cases = [  # (op, mode before, uid writing, its supplementary groups, mode after)
            ("pwrite", 0o6777, NOBODY, None, 0o777),
            ("append", 0o6777, NOBODY, None, 0o777),      # direct_io: kvfs's to drop
            ("direct", 0o6777, NOBODY, None, 0o777),      # O_DIRECT: the same
            ("pwrite", 0o2767, NOBODY, None, 0o767),      # S_ISGID without S_IXGRP, not a member
            ("truncate", 0o2767, NOBODY, None, 0o767),
            ("pwrite", 0o2767, 1000, None, 0o2767),       # a member of the file's group keeps it
            ("append", 0o2767, NOBODY, [1000], 0o2767),   # a member by a supplementary group too
            ("append", 0o2767, NOBODY, [12345], 0o767),   # another group is not the file's
            ("append", 0o6777, 0, None, 0o6777),          # root (CAP_FSETID) keeps both
        ]
        for i, (op, before, uid, groups, _) in enumerate(cases):
            path = m.path(f"f{i}")
            with open(path, "wb") as f:
                f.write(b"0" * 8192)
            os.chown(path, 1000, 1000)
            os.chmod(path, before)
            self.assertEqual(as_nobody(op, path, uid, groups), "ok", (op, oct(before), uid))
        for when in ("after the writes", "after a remount"):
            for i, (op, before, uid, groups, after) in enumerate(cases):
                self.assertEqual(oct(os.stat(m.path(f"f{i}")).st_mode & 0o7777), oct(after),
                                 f"{op} by uid {uid} of a {oct(before)} file, {when}")
            if when == "after the writes":
                m.remount()


if __name__ == "__main__":
    unittest.main()
