"""Shared harness for the connector replay tests (tests/connectors/*.py).

Each connector script replays, syscall by syscall, what one inference-engine connector's file
back-end does (naming scheme, open flags, temp files, existence checks, reads, eviction), and
checks the results byte for byte. This module holds only what the scripts share:

  * the run modes: against a fresh kvfs mount (default; needs tests/pylib/kvfs_testlib.py and
    KVFS_BIN), or against a plain directory (``--dir DIR`` or env KVFS_TEST_DIR) to validate the
    replay itself on a native filesystem;
  * thin wrappers around the syscalls that turn an unexpected OSError into a failure message
    naming the syscall, its flags and the errno (those messages are what the fs engineers get);
  * deterministic chunk payloads, page-aligned buffers for O_DIRECT, ctypes bindings for the
    calls Python's os module lacks (fallocate(2), utimensat(2) with UTIME_OMIT, linkat(2) with
    AT_EMPTY_PATH);
  * phases: a scenario is a sequence of named phases; a failing phase is reported and the run
    goes on with the phases that do not depend on it. Exit status 0 only if every phase passed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import ctypes
import ctypes.util
import errno
import hashlib
import mmap
import os
import random
import shutil
import sys
import tempfile
import time
import traceback

O_DIRECT = getattr(os, "O_DIRECT", 0)
O_NOATIME = getattr(os, "O_NOATIME", 0)
O_TMPFILE = getattr(os, "O_TMPFILE", 0)
PAGE = mmap.PAGESIZE

# ---------------------------------------------------------------------------------------------
# Failures
# ---------------------------------------------------------------------------------------------


class ReplayFailure(Exception):
    """A syscall failed where the connector expects success, or a result was wrong."""


def errname(e: int) -> str:
    return errno.errorcode.get(e, str(e))


_FLAG_BITS = [
    ("O_CREAT", os.O_CREAT), ("O_EXCL", os.O_EXCL), ("O_TRUNC", os.O_TRUNC),
    ("O_APPEND", os.O_APPEND), ("O_DIRECT", O_DIRECT), ("O_NOATIME", O_NOATIME),
    ("O_CLOEXEC", os.O_CLOEXEC), ("O_SYNC", os.O_SYNC), ("O_DIRECTORY", os.O_DIRECTORY),
]


def flagstr(flags: int) -> str:
    acc = flags & os.O_ACCMODE
    names = [{os.O_RDONLY: "O_RDONLY", os.O_WRONLY: "O_WRONLY",
              os.O_RDWR: "O_RDWR"}.get(acc, hex(acc))]
    rest = flags & ~os.O_ACCMODE
    if O_TMPFILE and (rest & O_TMPFILE) == O_TMPFILE:
        names.append("O_TMPFILE")
        rest &= ~O_TMPFILE
    for name, bit in _FLAG_BITS:
        if bit and (rest & bit) == bit:
            names.append(name)
            rest &= ~bit
    if rest:
        names.append(hex(rest))
    return "|".join(names)


def _short(v):
    r = repr(v)
    return r if len(r) <= 120 else r[:57] + "..." + r[-60:]


def sc(call: str, fn, *args, expect=(), **kw):
    """Run one syscall wrapper. An OSError whose errno is in `expect` is returned (not raised);
    any other OSError becomes a ReplayFailure naming `call` and the errno."""
    try:
        return fn(*args, **kw)
    except OSError as e:
        if e.errno in expect:
            return e
        raise ReplayFailure(f"{call} -> {errname(e.errno)} ({e.strerror})") from e


# Wrappers that carry the exact call description into the failure message.

def sys_open(path, flags, mode=0o666, dir_fd=None, expect=()):
    where = f", dir_fd={dir_fd}" if dir_fd is not None else ""
    return sc(f"open({_short(path)}, {flagstr(flags)}, {oct(mode)}{where})",
              os.open, path, flags, mode, dir_fd=dir_fd, expect=expect)


def sys_write_all(fd, data, what=""):
    """write(2) until everything is written (a short write is reported, then continued)."""
    mv = memoryview(data).cast("B")
    off = 0
    while off < len(mv):
        n = sc(f"write(fd of {what}, {len(mv) - off} bytes)", os.write, fd, mv[off:])
        if n <= 0:
            raise ReplayFailure(f"write(fd of {what}) returned {n}")
        off += n
    return off


def sys_pwrite_all(fd, buf, offset, what="", direct=False):
    n = sc(f"pwritev(fd of {what}{' O_DIRECT' if direct else ''}, {len(buf)} bytes, "
           f"offset {offset})", os.pwritev, fd, [buf], offset)
    if n != len(buf):
        raise ReplayFailure(f"pwritev({what}, {len(buf)} bytes, offset {offset}) wrote {n}")
    return n


def sys_pread_into(fd, buf, offset, what="", direct=False):
    return sc(f"preadv(fd of {what}{' O_DIRECT' if direct else ''}, {len(buf)} bytes, "
              f"offset {offset})", os.preadv, fd, [buf], offset)


def sys_stat(path, expect=(), dir_fd=None, follow=True):
    return sc(f"stat({_short(path)})", os.stat, path, dir_fd=dir_fd,
              follow_symlinks=follow, expect=expect)


def exists(path) -> bool:
    """What os.path.exists does (one stat), but only ENOENT is a miss: any other errno is a
    failure (a connector would silently treat it as a miss and recompute)."""
    r = sys_stat(path, expect=(errno.ENOENT,))
    return not isinstance(r, OSError)


def access_exists(path) -> bool:
    """faccessat(AT_FDCWD, path, F_OK): vLLM's C batch lookup."""
    try:
        return os.access(path, os.F_OK)
    except OSError as e:  # os.access returns False on errors; kept for completeness
        raise ReplayFailure(f"access({_short(path)}, F_OK) -> {errname(e.errno)}") from e


def sys_rename(src, dst, expect=()):
    return sc(f"rename({_short(src)}, {_short(dst)})", os.rename, src, dst, expect=expect)


def sys_unlink(path, expect=()):
    return sc(f"unlink({_short(path)})", os.unlink, path, expect=expect)


def sys_makedirs(path):
    return sc(f"mkdir -p {_short(path)}", os.makedirs, path, exist_ok=True)


def sys_mkdir(path, expect=(), dir_fd=None):
    return sc(f"mkdir({_short(path)})", os.mkdir, path, dir_fd=dir_fd, expect=expect)


def sys_listdir(path):
    return sc(f"readdir({_short(path)})", os.listdir, path)


def sys_statvfs(path):
    return sc(f"statvfs({_short(path)})", os.statvfs, path)


def sys_close(fd, what=""):
    return sc(f"close(fd of {what})", os.close, fd)


# ---------------------------------------------------------------------------------------------
# ctypes: fallocate(2), utimensat(2) with UTIME_NOW/UTIME_OMIT, linkat(2) with AT_EMPTY_PATH
# ---------------------------------------------------------------------------------------------

_libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
_libc.fallocate.restype = ctypes.c_int
_libc.linkat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                         ctypes.c_int]
_libc.linkat.restype = ctypes.c_int


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


_libc.utimensat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(_Timespec),
                            ctypes.c_int]
_libc.utimensat.restype = ctypes.c_int

AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
UTIME_NOW = (1 << 30) - 1
UTIME_OMIT = (1 << 30) - 2


def _raise_errno(call):
    e = ctypes.get_errno()
    raise OSError(e, f"{call}: {os.strerror(e)}")


def fallocate(fd, mode, offset, length):
    """fallocate(2) itself (os.posix_fallocate would silently fall back to writing zeros)."""
    if _libc.fallocate(fd, mode, offset, length) != 0:
        _raise_errno("fallocate")


def linkat_empty_path(fd, newpath):
    """linkat(fd, "", AT_FDCWD, newpath, AT_EMPTY_PATH): publish an O_TMPFILE file."""
    if _libc.linkat(fd, b"", AT_FDCWD, os.fsencode(newpath), AT_EMPTY_PATH) != 0:
        _raise_errno("linkat")


def utimensat(path, atime, mtime):
    """utimensat(AT_FDCWD, path, {atime, mtime}, 0); each time is UTIME_NOW, UTIME_OMIT or
    integer nanoseconds."""
    def ts(v):
        if v in (UTIME_NOW, UTIME_OMIT):
            return _Timespec(0, v)
        return _Timespec(v // 1_000_000_000, v % 1_000_000_000)
    arr = (_Timespec * 2)(ts(atime), ts(mtime))
    if _libc.utimensat(AT_FDCWD, os.fsencode(path), arr, 0) != 0:
        _raise_errno("utimensat")


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


def payload(key, size: int, version: int = 0) -> bytes:
    """Deterministic pseudo-random bytes for a chunk key (and version, for overwrites)."""
    seed = int.from_bytes(hashlib.blake2b(f"{key}|{version}".encode(), digest_size=8).digest(),
                          "little")
    return random.Random(seed).randbytes(size)


def aligned_buffer(size: int, align_to: int = PAGE) -> mmap.mmap:
    """A zeroed anonymous mapping: page-aligned address, length rounded up to `align_to`."""
    n = max(align_to, -(-size // align_to) * align_to)
    return mmap.mmap(-1, n)


def first_diff(a, b) -> int:
    a, b = memoryview(a).cast("B"), memoryview(b).cast("B")
    n = min(len(a), len(b))
    step = 1 << 16
    for off in range(0, n, step):
        if a[off:off + step] != b[off:off + step]:
            for i in range(off, min(off + step, n)):
                if a[i] != b[i]:
                    return i
    return n if len(a) != len(b) else -1


def check_bytes(what, got, want):
    d = first_diff(got, want)
    if d >= 0:
        raise ReplayFailure(f"{what}: content differs (got {len(got)} bytes, want {len(want)}, "
                            f"first difference at byte {d})")


def sha1_hex(s: str) -> str:
    return hashlib.sha1(s.encode()).hexdigest()


def sha256_hex(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


def pmap(fn, items, workers=4):
    """Run fn over items on a thread pool (the connectors' I/O thread pools); results in order;
    the first exception is re-raised."""
    items = list(items)
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(fn, items))


# ---------------------------------------------------------------------------------------------
# Phases and run modes
# ---------------------------------------------------------------------------------------------


class Ctx:
    """What a scenario gets: its root directory (not created yet: connectors create their own
    directory), whether it runs on kvfs, remount(), check(), note(), phase()."""

    def __init__(self, name, root, mount=None):
        self.name = name
        self.root = root
        self.mount = mount
        self.results = []      # (phase, status, detail)
        self.failed = set()
        self.notes = []

    @property
    def on_kvfs(self) -> bool:
        return self.mount is not None

    def check(self, cond, msg):
        if not cond:
            raise ReplayFailure(msg)

    def note(self, msg):
        self.notes.append(msg)
        print(f"  note: {msg}", flush=True)

    @property
    def durability_async(self) -> bool:
        return bool(self.mount) and "async" in " ".join(map(str, self.mount.extra_args))

    @property
    def capacity_bytes(self):
        """The --capacity given to kvfs, in bytes (None in plain directory mode)."""
        if not self.mount or not self.mount.capacity:
            return None
        s = str(self.mount.capacity).upper().rstrip("B").rstrip("I")
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
        return int(float(s[:-1]) * mult[s[-1]]) if s[-1] in mult else int(s)

    def crash_restart(self):
        """kill -9 the daemon (a crash: nothing flushed at exit), then start it again."""
        if not self.on_kvfs:
            return
        self.mount.kill9()
        self.mount.start()
        if not exists(self.root):
            raise ReplayFailure(f"after kill -9 and restart {self.root} is gone")

    def remount(self):
        """Restart kvfs on the same data directory (the scenario must have closed its fds)."""
        if not self.on_kvfs:
            return
        self.mount.remount()
        if not exists(self.root):
            raise ReplayFailure(f"after the restart {self.root} is gone: nothing the connector "
                                f"published survived (stat -> ENOENT)")

    @contextlib.contextmanager
    def _phase(self, name, needs, kvfs_only, restart):
        missing = [n for n in needs if n in self.failed]
        if missing:
            self.results.append((name, "SKIP", f"needs {', '.join(missing)}"))
            self.failed.add(name)
            print(f"SKIP {self.name}: {name} (needs {', '.join(missing)})", flush=True)
            yield False
            return
        if kvfs_only and not self.on_kvfs:
            self.results.append((name, "SKIP", "plain directory mode"))
            print(f"SKIP {self.name}: {name} (plain directory mode)", flush=True)
            yield False
            return
        t0 = time.monotonic()
        label = name + (" [plain directory: the restart is a no-op]"
                        if restart and not self.on_kvfs else "")
        try:
            yield True
        except ReplayFailure as e:
            self.failed.add(name)
            self.results.append((label, "FAIL", str(e)))
            print(f"FAIL {self.name}: {label}: {e}", flush=True)
        except Exception as e:  # a bug in the replay itself, or an unexpected error
            self.failed.add(name)
            detail = f"{type(e).__name__}: {e}"
            self.results.append((label, "FAIL", detail))
            print(f"FAIL {self.name}: {label}: {detail}", flush=True)
            traceback.print_exc()
        else:
            self.results.append((label, "PASS", ""))
            print(f"PASS {self.name}: {label} ({time.monotonic() - t0:.2f}s)", flush=True)

    def phase(self, name, needs=(), kvfs_only=False, restart=False):
        """Use as `with ctx.phase("x", needs=("y",)) as run:` then `if run:` ...
        kvfs_only: skipped on a plain directory (kvfs-specific semantics).
        restart: the phase restarts kvfs; on a plain directory it runs with a no-op restart,
        which checks the replay's own bookkeeping."""
        return self._phase(name, needs, kvfs_only, restart)

    def summary(self) -> int:
        n_fail = sum(1 for _, s, _ in self.results if s == "FAIL")
        n_pass = sum(1 for _, s, _ in self.results if s == "PASS")
        n_skip = sum(1 for _, s, _ in self.results if s == "SKIP")
        mode = "kvfs mount" if self.on_kvfs else "plain directory"
        print(f"== {self.name} on {mode}: {n_pass} passed, {n_fail} failed, {n_skip} skipped",
              flush=True)
        for name, status, detail in self.results:
            if status == "FAIL":
                print(f"   FAIL {name}: {detail}", flush=True)
        return 1 if n_fail else 0


def main(name, scenario, capacity="1G"):
    """Entry point of every connector script: run `scenario(ctx)` on a plain directory or on a
    fresh kvfs mount, then clean up."""
    ap = argparse.ArgumentParser(description=f"replay of the {name} connector's file I/O")
    ap.add_argument("--dir", help="run on this plain directory instead of a kvfs mount "
                                  "(also: env KVFS_TEST_DIR)")
    ap.add_argument("--keep", action="store_true", help="keep the files afterwards")
    args = ap.parse_args()
    plain = args.dir or os.environ.get("KVFS_TEST_DIR")
    if plain:
        os.makedirs(plain, exist_ok=True)
        top = tempfile.mkdtemp(prefix=f"{name}-", dir=plain)
        ctx = Ctx(name, os.path.join(top, name))
        try:
            scenario(ctx)
        finally:
            if not args.keep:
                shutil.rmtree(top, ignore_errors=True)
        return ctx.summary()

    try:
        from kvfs_testlib import KvfsMount  # tests/pylib, on PYTHONPATH via ctest
    except ImportError as e:
        print(f"cannot import kvfs_testlib ({e}); set PYTHONPATH to tests/pylib or use --dir",
              file=sys.stderr)
        return 2
    # KVFS_TEST_EXTRA_ARGS: extra daemon arguments, e.g. "--store memory" or "-o ..."
    extra = os.environ.get("KVFS_TEST_EXTRA_ARGS", "").split()
    with KvfsMount(capacity=capacity, extra_args=extra) as m:
        ctx = Ctx(name, os.path.join(m.mnt, name), mount=m)
        try:
            scenario(ctx)
        finally:
            code = ctx.summary()
            if code:
                print(f"--- kvfs log tail ({m.log_path}) ---\n{m.log_tail(3000)}", flush=True)
    return code
