"""Real shell tools through a kvfs mount: cp, cat, cmp, mv, rm, ls, find, du, stat, mkdir -p,
ln -s, touch -d, truncate, dd oflag=direct, sha256sum.

One mount serves the whole class (mounting is the slow part); every test works in its own
directory under it and in its own local source directory.
"""

import hashlib
import os
import shlex
import shutil
import subprocess
import tempfile
import unittest

from kvfs_testlib import KvfsMount, chunk_bytes

MiB = 1024 * 1024


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(MiB), b""):
            h.update(block)
    return h.hexdigest()


class ShellTools(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = KvfsMount(capacity="512M")
        cls.m.__enter__()
        cls.src_root = tempfile.mkdtemp(prefix="kvfs-src-")

    @classmethod
    def tearDownClass(cls):
        cls.m.__exit__(None, None, None)
        shutil.rmtree(cls.src_root, ignore_errors=True)

    def setUp(self):
        self.dir = self.m.path(self._testMethodName)
        os.mkdir(self.dir)
        self.src = os.path.join(self.src_root, self._testMethodName)
        os.mkdir(self.src)

    def sh(self, cmd, check=True):
        """Run cmd with bash in this test's directory in the mount."""
        r = subprocess.run(["bash", "-c", cmd], cwd=self.dir, capture_output=True, text=True,
                           timeout=120)
        if check and r.returncode != 0:
            self.fail(f"`{cmd}` exited {r.returncode}\nstdout: {r.stdout}\nstderr: {r.stderr}\n"
                      f"--- kvfs log ---\n{self.m.log_tail()}")
        return r

    def make_src(self, name, size):
        path = os.path.join(self.src, name)
        with open(path, "wb") as f:
            f.write(chunk_bytes(f"{self._testMethodName}/{name}", size))
        return path

    def read(self, name):
        with open(os.path.join(self.dir, name), "rb") as f:
            return f.read()

    # ---------------------------------------------------------------------------------------
    def test_cp(self):
        a = self.make_src("a", 5 * MiB + 123)
        empty = self.make_src("empty", 0)
        self.sh(f"cp {shlex.quote(a)} a && cp {shlex.quote(empty)} empty")
        self.assertEqual(os.path.getsize(os.path.join(self.dir, "a")), 5 * MiB + 123)
        self.assertEqual(os.path.getsize(os.path.join(self.dir, "empty")), 0)
        self.sh(f"cmp {shlex.quote(a)} a")
        # inside the mount, out of it, and recursively
        self.sh("cp a b && cmp a b")
        out = os.path.join(self.src, "back")
        self.sh(f"cp a {shlex.quote(out)}")
        self.assertEqual(sha256_file(out), sha256_file(a))
        self.sh(f"cp -r {shlex.quote(self.src)} tree && cmp tree/a a && test -f tree/empty")
        # cp over an existing file (O_TRUNC) replaces it
        small = self.make_src("small", 1000)
        self.sh(f"cp {shlex.quote(small)} b")
        self.assertEqual(self.read("b"), chunk_bytes(f"{self._testMethodName}/small", 1000))

    def test_cat(self):
        a = self.make_src("a", 3 * MiB + 7)
        b = self.make_src("b", 4096)
        self.sh(f"cat {shlex.quote(a)} > a && cat {shlex.quote(b)} > b")
        self.sh("cat a b > ab")
        with open(a, "rb") as fa, open(b, "rb") as fb:
            expected = fa.read() + fb.read()
        self.assertEqual(self.read("ab"), expected)
        r = subprocess.run(["cat", os.path.join(self.dir, "ab")], capture_output=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0)
        self.assertEqual(r.stdout, expected)
        self.sh("printf 'hello\\n' > small && printf 'world\\n' >> small")
        self.assertEqual(self.sh("cat small").stdout, "hello\nworld\n")

    def test_cmp(self):
        a = self.make_src("a", 2 * MiB)
        data = bytearray(chunk_bytes(f"{self._testMethodName}/a", 2 * MiB))
        data[-1] ^= 0xFF
        with open(os.path.join(self.src, "a-last-byte"), "wb") as f:
            f.write(data)
        self.sh(f"cp {shlex.quote(a)} a && cp {shlex.quote(self.src)}/a-last-byte b")
        self.assertEqual(self.sh(f"cmp a {shlex.quote(a)}", check=False).returncode, 0)
        r = self.sh("cmp a b", check=False)
        self.assertEqual(r.returncode, 1, r.stderr)
        # GNU cmp says "byte N" or, in the C locale of a minimal system, "char N".
        self.assertRegex(r.stdout, rf"(byte|char) {2 * MiB}\b")

    def test_mv(self):
        a = self.make_src("a", 2 * MiB)
        b = self.make_src("b", 1 * MiB + 1)
        self.sh(f"cp {shlex.quote(a)} a && cp {shlex.quote(b)} b && mkdir d1 d2")
        self.sh("mv a a2 && test ! -e a && cmp a2 " + shlex.quote(a))
        self.sh("mv a2 d1/a && cmp d1/a " + shlex.quote(a))           # across directories
        self.sh("mv -f b d1/a && test ! -e b && cmp d1/a " + shlex.quote(b))  # over a target
        self.sh("echo x > d1/x && mv d1 d2/moved")                      # whole directory
        self.sh("test ! -e d1 && cmp d2/moved/a " + shlex.quote(b) + " && test -f d2/moved/x")
        out = os.path.join(self.src, "out")
        self.sh(f"mv d2/moved/a {shlex.quote(out)}")                    # out of the mount
        self.assertFalse(os.path.exists(os.path.join(self.dir, "d2/moved/a")))
        self.assertEqual(sha256_file(out), sha256_file(b))
        self.sh(f"mv {shlex.quote(out)} back && cmp back {shlex.quote(b)}")  # into the mount
        self.assertFalse(os.path.exists(out))

    def test_rm(self):
        a = self.make_src("a", MiB)
        self.sh(f"cp {shlex.quote(a)} a && mkdir -p t/u/v && cp a t/u/v/a && touch t/u/e")
        self.sh("rm a && test ! -e a")
        with self.assertRaises(FileNotFoundError):
            os.stat(os.path.join(self.dir, "a"))
        self.assertNotEqual(self.sh("rm a", check=False).returncode, 0)
        self.sh("rm -f a")
        self.assertNotEqual(self.sh("rmdir t", check=False).returncode, 0)  # not empty
        self.sh("rm -r t && test ! -e t")
        self.assertEqual(os.listdir(self.dir), [])
        # the name can be used again afterwards
        self.sh(f"cp {shlex.quote(a)} a && cmp a {shlex.quote(a)}")

    def test_ls(self):
        names = [f"{i:04d}-{hashlib.sha256(str(i).encode()).hexdigest()[:24]}" for i in range(300)]
        for i, n in enumerate(names):
            with open(os.path.join(self.dir, n), "wb") as f:
                f.write(chunk_bytes(n, i * 37))
        listed = self.sh("ls -1").stdout.split()
        self.assertEqual(listed, sorted(names))
        long = self.sh("ls -l --time-style=+").stdout.splitlines()
        self.assertTrue(long[0].startswith("total"), long[0])
        sizes = {}
        for line in long[1:]:
            fields = line.split()
            sizes[fields[-1]] = int(fields[4])
            self.assertTrue(fields[0].startswith("-"), line)
        self.assertEqual(sizes, {n: i * 37 for i, n in enumerate(names)})
        # the control directory is hidden from readdir, but reachable by name
        root_all = self.sh(f"ls -a {shlex.quote(self.m.mnt)}").stdout.split()
        self.assertNotIn(".kvfs", root_all)
        self.assertIn(self._testMethodName, root_all)
        self.sh(f"test -e {shlex.quote(self.m.mnt)}/.kvfs/status")

    def test_find(self):
        self.sh("mkdir -p m/ab/cd m/ab/ef m/12/34")
        for rel, size in [("m/ab/cd/abcd01", 10), ("m/ab/cd/abcd02", 2 * MiB),
                          ("m/ab/ef/abef01", 0), ("m/12/34/1234.tmp", 5)]:
            with open(os.path.join(self.dir, rel), "wb") as f:
                f.write(chunk_bytes(rel, size))
        self.sh("ln -s ab/cd/abcd01 m/link")
        files = sorted(self.sh("find m -type f").stdout.split())
        self.assertEqual(files, ["m/12/34/1234.tmp", "m/ab/cd/abcd01", "m/ab/cd/abcd02",
                                 "m/ab/ef/abef01"])
        self.assertEqual(self.sh("find m -type l").stdout.split(), ["m/link"])
        self.assertEqual(len(self.sh("find m -type d").stdout.split()), 6)
        self.assertEqual(self.sh("find m -name '*.tmp'").stdout.split(), ["m/12/34/1234.tmp"])
        self.assertEqual(self.sh("find m -type f -size +1M").stdout.split(),
                         ["m/ab/cd/abcd02"])
        self.assertEqual(self.sh("find m -type f -empty").stdout.split(), ["m/ab/ef/abef01"])
        self.sh("find m -name '*.tmp' -delete")
        self.assertFalse(os.path.exists(os.path.join(self.dir, "m/12/34/1234.tmp")))

    def test_du(self):
        sizes = [MiB, 3 * MiB + 5, 4096, 0]
        for i, size in enumerate(sizes):
            with open(os.path.join(self.dir, f"f{i}"), "wb") as f:
                f.write(chunk_bytes(f"du{i}", size))
        apparent = int(self.sh("du -sb --apparent-size .").stdout.split()[0])
        self.assertGreaterEqual(apparent, sum(sizes))   # plus the directory's own size
        self.assertLess(apparent, sum(sizes) + 64 * 1024)
        self.assertEqual(int(self.sh("du -b --apparent-size f1").stdout.split()[0]), 3 * MiB + 5)
        # The content is incompressible: the blocks it occupies cannot be far below its size.
        used_kib = int(self.sh("du -sk .").stdout.split()[0])
        self.assertGreaterEqual(used_kib, sum(sizes) // 1024 // 2)
        self.assertLess(used_kib, 2 * sum(sizes) // 1024 + 1024)

    def test_stat(self):
        a = self.make_src("a", 1234567)
        self.sh(f"cp {shlex.quote(a)} a && mkdir d && ln -s a l")
        self.assertEqual(self.sh("stat -c '%s|%F' a").stdout.strip(), "1234567|regular file")
        self.assertEqual(self.sh("stat -c '%F' d").stdout.strip(), "directory")
        self.assertEqual(self.sh("stat -c '%F' l").stdout.strip(), "symbolic link")
        self.assertEqual(self.sh("stat -L -c '%s' l").stdout.strip(), "1234567")
        self.sh("chmod 600 a")
        self.assertEqual(self.sh("stat -c '%a' a").stdout.strip(), "600")
        self.assertNotEqual(self.sh("stat missing", check=False).returncode, 0)

    def test_stat_filesystem(self):
        # statvfs reflects kvfs capacity (512M for this mount), not the host disk
        out = self.sh(f"stat -f -c '%S %b %a %s' {shlex.quote(self.m.mnt)}").stdout.split()
        frsize, blocks, bavail, bsize = map(int, out)
        self.assertGreater(frsize, 0)
        self.assertGreater(bsize, 0)
        total = frsize * blocks
        self.assertLessEqual(total, 512 * MiB)
        self.assertGreaterEqual(total, 256 * MiB)
        self.assertLessEqual(bavail, blocks)
        df = self.sh(f"df -k --output=size {shlex.quote(self.m.mnt)}").stdout.split()
        self.assertAlmostEqual(int(df[-1]) * 1024, total, delta=1024)

    def test_mkdir_p(self):
        self.sh("mkdir -p llama3-8b/ab/cd llama3-8b/ab/ef && mkdir -p llama3-8b/ab/cd")
        self.assertEqual(self.sh("stat -c '%F' llama3-8b/ab/cd").stdout.strip(), "directory")
        self.assertEqual(sorted(os.listdir(os.path.join(self.dir, "llama3-8b/ab"))),
                         ["cd", "ef"])
        self.sh("printf data > llama3-8b/ab/cd/abcd1234")
        self.assertEqual(self.sh("cat llama3-8b/ab/cd/abcd1234").stdout, "data")
        # mkdir on an existing name fails; mkdir -p through a file fails
        self.assertNotEqual(self.sh("mkdir llama3-8b", check=False).returncode, 0)
        self.assertNotEqual(self.sh("mkdir -p llama3-8b/ab/cd/abcd1234/x",
                                    check=False).returncode, 0)

    def test_ln_s(self):
        a = self.make_src("a", 100000)
        self.sh(f"cp {shlex.quote(a)} a && mkdir sub && ln -s a link && ln -s ../a sub/rel")
        self.sh(f"ln -s {shlex.quote(a)} abs && ln -s nowhere dangling")
        self.assertEqual(self.sh("readlink link").stdout.strip(), "a")
        self.assertEqual(self.sh("readlink sub/rel").stdout.strip(), "../a")
        self.assertEqual(os.readlink(os.path.join(self.dir, "abs")), a)
        self.sh(f"cmp link {shlex.quote(a)} && cmp sub/rel {shlex.quote(a)} && cmp abs a")
        self.assertIn("link -> a", self.sh("ls -l link").stdout)
        self.sh("test -L dangling && test ! -e dangling")
        self.sh("rm link && test -f a")    # removing a link leaves its target

    def test_touch_d(self):
        self.sh("touch new")
        self.assertEqual(os.path.getsize(os.path.join(self.dir, "new")), 0)
        a = self.make_src("a", MiB)
        self.sh(f"cp {shlex.quote(a)} a")
        self.sh("touch -d '2001-02-03 04:05:06 UTC' a")
        self.assertEqual(self.sh("stat -c %Y a").stdout.strip(), "981173106")
        self.sh("touch -a -d '2010-01-01 00:00:00 UTC' a")             # atime only
        self.assertEqual(self.sh("stat -c '%X %Y' a").stdout.split(), ["1262304000", "981173106"])
        self.sh("touch -m -d '@1700000000' a")
        st = os.stat(os.path.join(self.dir, "a"))
        self.assertEqual(int(st.st_mtime), 1700000000)
        self.assertEqual(int(st.st_atime), 1262304000)
        self.sh(f"cmp a {shlex.quote(a)}")                                # content untouched

    def test_truncate(self):
        self.sh("truncate -s 1M zeros")
        self.assertEqual(self.read("zeros"), bytes(MiB))
        a = self.make_src("a", 3 * MiB)
        data = chunk_bytes(f"{self._testMethodName}/a", 3 * MiB)
        self.sh(f"cp {shlex.quote(a)} a")
        self.sh("truncate -s 1M a")
        self.assertEqual(self.read("a"), data[:MiB])
        self.sh("truncate -s 2M a")
        self.assertEqual(self.read("a"), data[:MiB] + bytes(MiB))
        self.sh("truncate -s 0 a")
        self.assertEqual(os.path.getsize(os.path.join(self.dir, "a")), 0)

    def test_dd_oflag_direct(self):
        bsize = os.statvfs(self.m.mnt).f_bsize
        a = self.make_src("a", 8 * MiB)
        self.sh(f"dd if={shlex.quote(a)} of=d bs=1M oflag=direct status=none")
        self.sh(f"cmp d {shlex.quote(a)}")
        b = self.make_src("b", 64 * bsize)
        self.sh(f"dd if={shlex.quote(b)} of=small bs={bsize} oflag=direct status=none")
        self.sh(f"cmp small {shlex.quote(b)}")
        # O_DIRECT reads
        r = subprocess.run(["dd", f"if={os.path.join(self.dir, 'd')}", "bs=1M", "iflag=direct",
                            "status=none"], capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(hashlib.sha256(r.stdout).hexdigest(), sha256_file(a))
        # overwrite an existing file in place, O_DIRECT without O_TRUNC
        c = self.make_src("c", 8 * MiB)
        self.sh(f"dd if={shlex.quote(c)} of=d bs=1M oflag=direct conv=notrunc status=none")
        self.sh(f"cmp d {shlex.quote(c)}")

    def test_sha256sum(self):
        for i in range(12):
            self.make_src(f"chunk{i:02d}", (i + 1) * 300000)
        self.sh(f"cp {shlex.quote(self.src)}/* .")
        sums = subprocess.run(["sha256sum"] + sorted(os.listdir(self.src)), cwd=self.src,
                              capture_output=True, text=True, check=True).stdout
        with open(os.path.join(self.src, "SUMS"), "w") as f:
            f.write(sums)
        self.sh(f"sha256sum --quiet -c {shlex.quote(self.src)}/SUMS")
        mine = self.sh("sha256sum chunk*").stdout
        self.assertEqual(mine, sums)


if __name__ == "__main__":
    unittest.main()
