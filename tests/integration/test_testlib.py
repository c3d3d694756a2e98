"""The test harness's own helpers: content and names must be what the other tests rely on."""

import hashlib
import unittest

from kvfs_testlib import chunk_bytes, lmcache_key, prefix_hash_names

MiB = 1024 * 1024


class Helpers(unittest.TestCase):
    def test_chunk_bytes_deterministic_and_prefix_stable(self):
        a = chunk_bytes("llama3-8b/abc", 3 * MiB + 5)
        self.assertEqual(len(a), 3 * MiB + 5)
        self.assertEqual(a, chunk_bytes(b"llama3-8b/abc", 3 * MiB + 5))
        self.assertEqual(chunk_bytes("llama3-8b/abc", 100000), a[:100000])
        self.assertEqual(chunk_bytes("x", 0), b"")

    def test_chunk_bytes_blocks_all_differ(self):
        a = chunk_bytes("n", 8 * MiB)
        blocks = {a[i:i + 4096] for i in range(0, len(a), 4096)}
        self.assertEqual(len(blocks), len(a) // 4096)     # a misplaced page is detectable
        b = chunk_bytes("m", 8 * MiB)
        self.assertFalse(blocks & {b[i:i + 4096] for i in range(0, len(b), 4096)})

    def test_prefix_hash_names_chain(self):
        tokens = list(range(1000))
        names = prefix_hash_names(tokens, 256)
        self.assertEqual(len(names), 4)                    # 3 full chunks + the partial one
        self.assertEqual(prefix_hash_names(tokens, 256, include_partial=False), names[:3])
        self.assertEqual(len(set(names)), 4)
        self.assertTrue(all(len(n) == 64 and int(n, 16) >= 0 for n in names))
        # a chunk's name depends on everything before it, not only on its own tokens
        other = prefix_hash_names([7] + tokens[1:], 256)
        self.assertTrue(all(x != y for x, y in zip(names, other)))
        # a shared prefix gives shared names, up to the first differing chunk
        fork = prefix_hash_names(tokens[:512] + [5] * 488, 256)
        self.assertEqual(fork[:2], names[:2])
        self.assertNotEqual(fork[2], names[2])
        # the chain rule itself
        prev = hashlib.sha256(b"kvfs").digest()
        h = hashlib.sha256(prev)
        for t in tokens[:256]:
            h.update(t.to_bytes(4, "little"))
        self.assertEqual(names[0], h.hexdigest())

    def test_lmcache_key(self):
        self.assertEqual(lmcache_key("llama3-8b", "ab12"), "llama3-8b@1@0@ab12@pt")


if __name__ == "__main__":
    unittest.main()
