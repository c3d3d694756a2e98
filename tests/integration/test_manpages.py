"""The manual pages render with man(1) without a single warning, and they document every option
the binaries accept."""

import os
import re
import subprocess
import unittest

from kvfs_testlib import REPO_ROOT, default_kvfs_bin, default_kvfsctl_bin

PAGES = ["kvfs.8", "kvfsctl.8", "kvfs.conf.5"]


def render(page):
    env = dict(os.environ, MANWIDTH="80", MANPAGER="cat", PAGER="cat", LC_ALL="C.UTF-8")
    return subprocess.run(["man", "--warnings", "-l", str(REPO_ROOT / "man" / page)],
                          capture_output=True, text=True, env=env, timeout=60)


def long_options(help_text):
    return sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", help_text)))


class ManPages(unittest.TestCase):
    def check_page(self, page, must_mention):
        r = render(page)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "", f"man --warnings reported problems in {page}")
        # undo line breaks and hyphenation so phrases can be found wherever lines wrap
        text = re.sub(r"\s+", " ", re.sub(r"\u2010\n\s*", "", r.stdout))
        self.assertIn("NAME", text)
        self.assertIn("SYNOPSIS", text)
        for word in must_mention:
            self.assertIn(word, text, f"{page} does not mention {word}")
        # no roff left unrendered
        self.assertNotRegex(r.stdout, r"(?m)^\.[A-Za-z]{1,2}\b", f"raw roff request in {page}")
        self.assertNotIn("\\f", r.stdout)

    def test_kvfs_8(self):
        self.check_page("kvfs.8", ["--data", "--capacity", "--device", "--durability",
                                   "--compress", "fusermount3", "kvfs.conf", "kvfsctl"])

    def test_kvfsctl_8(self):
        self.check_page("kvfsctl.8", ["status", "stat", "--json", "EXIT STATUS"])

    def test_kvfs_conf_5(self):
        self.check_page("kvfs.conf.5", ["[storage]", "data_dir", "capacity", "devices",
                                        "durability", "compress", "segment_size", "[node]",
                                        "etcd", "lease_ttl_s", "replicas", "secret_file", "transport",
                                        "not yet implemented"])

    def _binary_options_documented(self, binary, page):
        if not os.access(binary, os.X_OK):
            self.skipTest(f"{binary} is not built")
        r = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        text = re.sub(r"\u2010\n\s*", "", render(page).stdout)
        missing = [o for o in long_options(r.stdout + r.stderr)
                   if o not in text and o != "--help-all"]
        self.assertEqual(missing, [], f"{page} does not document {missing}")

    def test_kvfs_options_documented(self):
        self._binary_options_documented(default_kvfs_bin(), "kvfs.8")

    def test_kvfsctl_options_documented(self):
        self._binary_options_documented(default_kvfsctl_bin(), "kvfsctl.8")


if __name__ == "__main__":
    unittest.main()
