"""The writer of the crash test: publishes chunk files in a loop the way connectors do (write a
temp file, set a user xattr, close it, rename it over the final name, set another) until the
mount goes away.

    python3 crash_writer.py DIR ROUND LOG MAX_FILES

Content and size are pure functions of the name (size_for, kvfs_testlib.chunk_bytes), so a
reader can check any file it finds. After each rename returns, the name is appended to LOG (on
a local disk), so the test knows which publishes completed before the daemon was killed.
"""

import hashlib
import os
import sys

from kvfs_testlib import chunk_bytes

KiB = 1024
MiB = 1024 * KiB


def size_for(name: str) -> int:
    """4 KiB .. ~2 MiB, some unaligned, every 16th one large (8-9 MiB)."""
    h = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")
    size = 4 * KiB * (1 + h % 512)
    if h % 3 == 0:
        size -= (h >> 16) % 4096                  # unaligned tail
    if (h >> 32) % 16 == 0:
        size = 8 * MiB + (h >> 40) % MiB          # large, spans many segments
    return size


def subdir_for(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()[:1]


def main() -> int:
    root, rnd, log_path, max_files = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    staging = os.path.join(root, ".staging")
    published = []
    with open(log_path, "a", buffering=1) as log:
        try:
            os.makedirs(staging, exist_ok=True)
            for i in range(max_files):
                if i % 7 == 6 and published:
                    name = published[len(published) // 2]   # republish over an existing name
                else:
                    name = f"r{rnd}-{i:04d}"
                d = os.path.join(root, subdir_for(name))
                os.makedirs(d, exist_ok=True)
                final = os.path.join(d, name)
                # temp beside the target, or in a staging directory (rename across dirs)
                tmp = final + ".tmp" if i % 3 else os.path.join(staging, name + ".tmp")
                data = chunk_bytes(name, size_for(name))
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                try:
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                    # Set before the first close: published with the file, or not at all.
                    os.setxattr(fd, "user.name", name.encode())
                finally:
                    os.close(fd)
                os.rename(tmp, final)
                # A change of its own, journaled after the publish.
                os.setxattr(final, "user.after", name.encode())
                log.write(os.path.relpath(final, root) + "\n")
                published.append(name)
        except OSError as e:
            # The daemon was killed under us: ENOTCONN, ECONNABORTED, EIO... all expected.
            log.write(f"# stopped: {e}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
