"""Hard links, special files and renames against a reference file system: the same random
sequence of create, link, unlink, rename, mkdir, rmdir, mkfifo, mknod (socket) and rewrite runs
in a kvfs mount and in a local temporary directory, and after every step each call's result
(errno) must match; at the end, and again after a remount, the two trees must be the same:
every name with its type, content, link count, and which names share an inode.

A fixed seed keeps a failure reproducible; KVFS_MODEL_SEED and KVFS_MODEL_STEPS change it.
"""

import errno
import os
import random
import shutil
import stat
import tempfile
import unittest

from kvfs_testlib import KvfsMount

NAMES = ["a", "b", "c", "d1/a", "d1/b", "d1/e", "d2/a", "d2/f", "d1/d3/g"]
DIRS = ["d1", "d2", "d1/d3", "d4"]


def snapshot(root):
    """name -> (type, content or None, nlink, group): names with the same group share an inode."""
    out, groups = {}, {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in sorted(dirnames + filenames):
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, root)
            st = os.lstat(p)
            kind = stat.S_IFMT(st.st_mode)
            content = None
            if stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    content = f.read()
            nlink = st.st_nlink
            group = groups.setdefault(st.st_ino, len(groups)) if not stat.S_ISDIR(kind) else None
            out[rel] = (kind, content, nlink, group)
    # Group numbers depend on walk order only, which is the same sorted order on both sides.
    return out


def canonical(snap):
    """Replaces group numbers by the sorted list of names sharing each inode."""
    members = {}
    for name, (_, _, _, g) in snap.items():
        if g is not None:
            members.setdefault(g, []).append(name)
    return {name: (k, c, n, tuple(sorted(members[g])) if g is not None else None)
            for name, (k, c, n, g) in snap.items()}


class LinksModel(unittest.TestCase):
    def test_random_operations_match_a_local_file_system(self):
        seed = int(os.environ.get("KVFS_MODEL_SEED", "20261123"))
        steps = int(os.environ.get("KVFS_MODEL_STEPS", "1500"))
        rng = random.Random(seed)
        ref = tempfile.mkdtemp(prefix="kvfs-model-ref-")
        self.addCleanup(shutil.rmtree, ref, True)
        with KvfsMount(capacity="256M") as m:
            roots = {"kvfs": m.path("model"), "ref": ref}
            os.mkdir(roots["kvfs"])

            def do(op, *args):
                results = {}
                for side, root in roots.items():
                    paths = [os.path.join(root, a) for a in args if isinstance(a, str)]
                    try:
                        op(*paths, *[a for a in args if not isinstance(a, str)])
                        results[side] = 0
                    except OSError as e:
                        results[side] = e.errno
                return results

            def write(path, data):
                # Non-blocking, so a FIFO gives ENXIO (no reader) instead of waiting forever.
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK, 0o644)
                try:
                    os.write(fd, data)
                finally:
                    os.close(fd)

            def mksock(path):
                os.mknod(path, stat.S_IFSOCK | 0o644)

            for d in DIRS[:3]:
                do(os.mkdir, d)
            ok = {}  # successful calls by kind, to show the sequence did something
            for step in range(steps):
                kind = rng.choice(["write", "write", "link", "link", "unlink", "rename",
                                   "rename", "mkdir", "rmdir", "fifo", "sock"])
                a, b = rng.choice(NAMES + DIRS), rng.choice(NAMES + DIRS)
                if kind == "write":
                    data = bytes([rng.randrange(256)]) * rng.randrange(0, 3 * 4096)
                    r = do(lambda p, d=data: write(p, d), a)
                elif kind == "link":
                    r = do(os.link, a, b)
                elif kind == "unlink":
                    r = do(os.unlink, a)
                elif kind == "rename":
                    r = do(os.rename, a, b)
                elif kind == "mkdir":
                    r = do(os.mkdir, rng.choice(DIRS))
                elif kind == "rmdir":
                    r = do(os.rmdir, rng.choice(DIRS))
                elif kind == "fifo":
                    r = do(os.mkfifo, a)
                else:
                    r = do(mksock, a)
                self.assertEqual(r["kvfs"], r["ref"],
                                 f"step {step}: {kind} {a} {b}: kvfs {errno.errorcode.get(r['kvfs'], r['kvfs'])}"
                                 f", reference {errno.errorcode.get(r['ref'], r['ref'])} (seed {seed})")
                ok[kind] = ok.get(kind, 0) + (r["ref"] == 0)
                if step % 100 == 99:
                    self.assertEqual(canonical(snapshot(roots["kvfs"])),
                                     canonical(snapshot(roots["ref"])), f"after step {step}")
            expected = canonical(snapshot(roots["ref"]))
            self.assertEqual(canonical(snapshot(roots["kvfs"])), expected)
            if steps >= 1000:
                for kind in ("write", "link", "unlink", "rename", "fifo", "sock"):
                    self.assertGreater(ok.get(kind, 0), 10, f"few successful {kind}s: {ok}")
            m.remount()
            self.assertEqual(canonical(snapshot(m.path("model"))), expected, "after a remount")


if __name__ == "__main__":
    unittest.main()
