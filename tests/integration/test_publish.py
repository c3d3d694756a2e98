"""Publishing KV chunks the way connectors do (temp file + rename, prefix-hash names), readers of
a replaced file, and persistence of everything across unmount + mount."""

import os
import subprocess
import threading
import unittest
import uuid

from kvfs_testlib import KvfsMount, chunk_bytes, file_matches, prefix_hash_names

MiB = 1024 * 1024
MODEL = "llama3-8b"


def publish(path, data, style, tmpdir=None):
    """Write data to a temp name in one of the connectors' styles, close it, rename to path."""
    d, base = os.path.split(path)
    if style == "tmp":
        tmp = path + ".tmp"
    elif style == "pid_tid_uuid":
        tmp = f"{path}.tmp.{os.getpid()}.{threading.get_ident()}.{uuid.uuid4().hex}"
    elif style == "underscore":
        tmp = os.path.join(d, f"{base}_{uuid.uuid4().hex[:8]}.tmp")
    elif style == "subdir":
        tmp = os.path.join(tmpdir, base + ".part")
    else:
        raise ValueError(style)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)
    os.rename(tmp, path)


class Publish(unittest.TestCase):
    def setUp(self):
        self.m = KvfsMount(capacity="1G")
        self.m.__enter__()
        self.addCleanup(self.m.__exit__, None, None, None)

    def check(self, path, name, size):
        self.assertTrue(file_matches(path, name, size),
                        f"{path}: content differs from chunk_bytes({name!r}, {size})")

    def test_prefix_chunks_temp_rename(self):
        """Two requests sharing a system prompt: 36 chunks of 4 MiB, shared ones republished."""
        chunk_tokens = 256
        system = list(range(100000, 100000 + 8 * chunk_tokens))       # 8 shared chunks
        req_a = system + list(range(1, 14 * chunk_tokens + 1))       # 22 chunks
        req_b = system + list(range(50000, 50000 + 14 * chunk_tokens))  # 22 chunks
        names_a = prefix_hash_names(req_a, chunk_tokens)
        names_b = prefix_hash_names(req_b, chunk_tokens)
        self.assertEqual(names_a[:8], names_b[:8])
        self.assertNotEqual(names_a[8], names_b[8])
        model_dir = self.m.path(MODEL)
        tmpdir = self.m.path(MODEL, ".staging")
        os.makedirs(tmpdir)
        styles = ["tmp", "pid_tid_uuid", "underscore", "subdir"]
        size = 4 * MiB
        for names in (names_a, names_b):
            for i, name in enumerate(names):
                publish(os.path.join(model_dir, name), chunk_bytes(name, size),
                        styles[i % len(styles)], tmpdir)
        expected = sorted(set(names_a) | set(names_b))
        self.assertEqual(len(expected), 36)
        listed = sorted(n for n in os.listdir(model_dir) if n != ".staging")
        self.assertEqual(listed, expected)             # no temp name left behind
        self.assertEqual(os.listdir(tmpdir), [])
        for name in expected:
            self.assertEqual(os.stat(os.path.join(model_dir, name)).st_size, size)
            self.check(os.path.join(model_dir, name), name, size)
        # a connector's lookup: walk the prefix, stop at the first miss
        req_c = req_a[:10 * chunk_tokens] + [7] * (4 * chunk_tokens)
        hits = 0
        for name in prefix_hash_names(req_c, chunk_tokens):
            if not os.path.exists(os.path.join(model_dir, name)):
                break
            hits += 1
        self.assertEqual(hits, 10)

    def test_rename_over_keeps_open_reader(self):
        """A reader that opened the old version reads it whole after the name is replaced."""
        path = self.m.path("chunk")
        publish(path, chunk_bytes("v1", 6 * MiB), "tmp")
        with open(path, "rb") as old:
            head = old.read(4096)
            publish(path, chunk_bytes("v2", 5 * MiB), "pid_tid_uuid")
            rest = old.read()
        self.assertEqual(head + rest, chunk_bytes("v1", 6 * MiB))
        self.check(path, "v2", 5 * MiB)
        # unlinked while open: still readable through the open descriptor
        with open(path, "rb") as f:
            os.unlink(path)
            self.assertEqual(f.read(), chunk_bytes("v2", 5 * MiB))
        self.assertFalse(os.path.exists(path))

    def test_remount_persistence(self):
        sizes = [0, 1, 4095, 4096, 4097, MiB - 1, MiB, MiB + 1, 5 * MiB + 3, 9 * MiB]
        files = {}
        for i, size in enumerate(sizes):
            rel = os.path.join("ab", f"{i:02x}", f"chunk{i}") if i % 2 else f"flat{i}"
            os.makedirs(os.path.dirname(self.m.path(rel)) or self.m.mnt, exist_ok=True)
            publish(self.m.path(rel), chunk_bytes(rel, size), "tmp")
            files[rel] = size
        os.makedirs(self.m.path("empty", "dir"))
        os.symlink("flat0", self.m.path("link"))
        os.symlink("../../flat2", self.m.path("ab", "01", "uplink"))
        subprocess.run(["touch", "-d", "2001-02-03 04:05:06 UTC", self.m.path("flat2")],
                       check=True)
        before = self._tree()
        self.m.remount()
        self.assertEqual(self._tree(), before)
        for rel, size in files.items():
            self.check(self.m.path(rel), rel, size)
        self.assertEqual(os.readlink(self.m.path("link")), "flat0")
        self.assertEqual(int(os.stat(self.m.path("flat2")).st_mtime), 981173106)
        with open(self.m.path("ab", "01", "uplink"), "rb") as f:
            self.assertEqual(f.read(), chunk_bytes("flat2", 4095))
        # and once more, after changes made by the second daemon
        os.unlink(self.m.path("flat4"))
        os.rename(self.m.path("flat6"), self.m.path("renamed6"))
        publish(self.m.path("flat8"), chunk_bytes("new8", 3 * MiB), "tmp")
        self.m.remount()
        self.assertFalse(os.path.exists(self.m.path("flat4")))
        self.assertFalse(os.path.exists(self.m.path("flat6")))
        self.check(self.m.path("renamed6"), "flat6", MiB)
        self.check(self.m.path("flat8"), "new8", 3 * MiB)

    def _tree(self):
        """{relative path: (type, size)} of everything under the mount, sorted."""
        out = {}
        for dirpath, dirnames, filenames in os.walk(self.m.mnt):
            for n in dirnames + filenames:
                p = os.path.join(dirpath, n)
                st = os.lstat(p)
                kind = "l" if os.path.islink(p) else "d" if os.path.isdir(p) else "f"
                out[os.path.relpath(p, self.m.mnt)] = (kind, st.st_size if kind == "f" else 0)
        return dict(sorted(out.items()))


if __name__ == "__main__":
    unittest.main()
