"""kvfsctl nodes and kvfsctl where on a single-node mount (no cluster flags): the node lists
itself as node 0 in state "self", every file is local, and the exit codes follow kvfsctl's
convention (0 ok, 1 a problem found, 2 usage or not a kvfs mount)."""

import json
import os
import tempfile
import unittest

from kvfs_testlib import KvfsMount, chunk_bytes, write_file_atomic


class KvfsctlSingleNode(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.m = KvfsMount(capacity="64M")
        cls.m.start()

    @classmethod
    def tearDownClass(cls):
        cls.m.cleanup()

    def ctl(self, *args):
        return self.m.kvfsctl(*args)

    def test_nodes_lists_this_node_as_self(self):
        r = self.ctl("nodes", self.m.mnt, "--json")
        self.assertEqual(r.returncode, 0, r.stderr)
        doc = json.loads(r.stdout)
        with open(self.m.path(".kvfs", "nodes")) as f:
            raw = json.load(f)
        self.assertEqual(doc["self"], raw["self"])
        self.assertEqual(len(doc["nodes"]), 1)
        node = doc["nodes"][0]
        self.assertEqual(node["id"], 0)
        self.assertEqual(node["state"], "self")
        self.assertGreater(node["capacity_bytes"], 0)

        r = self.ctl("nodes", self.m.mnt)
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.splitlines()
        self.assertTrue(lines[1].split()[:1] == ["ID"], r.stdout)
        self.assertEqual(len(lines), 3, r.stdout)
        self.assertEqual(lines[2].split()[0], "0")
        self.assertIn("self", lines[2].split())

        # Any path inside the mount names the mount.
        os.makedirs(self.m.path("sub"), exist_ok=True)
        self.assertEqual(self.ctl("nodes", self.m.path("sub")).returncode, 0)

    def test_nodes_exit_2_off_kvfs_and_on_bad_usage(self):
        with tempfile.TemporaryDirectory() as d:
            r = self.ctl("nodes", d)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn("not on a kvfs mount", r.stderr)
        self.assertEqual(self.ctl("nodes").returncode, 2)

    def test_where_says_local(self):
        data = chunk_bytes("where-single", 70_000)
        path = self.m.path("w", "a.bin")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_file_atomic(path, data)
        r = self.ctl("where", path, "--json")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        (entry,) = json.loads(r.stdout)["where"]
        self.assertTrue(entry["ok"], entry)
        loc = entry["location"]
        self.assertTrue(loc["local"], loc)
        self.assertEqual([(h["id"], h["state"]) for h in loc["holders"]], [(0, "self")], loc)
        self.assertEqual(loc, json.loads(os.getxattr(path, "user.kvfs.location")))

        r = self.ctl("where", path)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(path, r.stdout)
        self.assertRegex(r.stdout, r"local\s+yes")

    def test_where_exit_codes(self):
        path = self.m.path("w2", "b.bin")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_file_atomic(path, b"x" * 1000)
        missing = self.m.path("w2", "missing.bin")
        r = self.ctl("where", path, missing, "--json")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        entries = {e["path"]: e for e in json.loads(r.stdout)["where"]}
        self.assertTrue(entries[path]["ok"])
        self.assertFalse(entries[missing]["ok"])
        self.assertIn("No such file", entries[missing]["error"])
        r = self.ctl("where", missing)
        self.assertEqual(r.returncode, 1)
        self.assertIn(missing, r.stderr)
        with tempfile.NamedTemporaryFile() as f:
            r = self.ctl("where", path, f.name)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertEqual(r.stdout, "", "nothing is reported before the usage check")
        self.assertEqual(self.ctl("where").returncode, 2)


if __name__ == "__main__":
    unittest.main()
