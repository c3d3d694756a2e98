"""Test helpers for kvfs: run a real mount in a temp directory, make chunk content, name chunks.

Python 3 standard library only. Typical use:

    from kvfs_testlib import KvfsMount, chunk_bytes, prefix_hash_names

    with KvfsMount(capacity="256M") as m:
        path = os.path.join(m.mnt, "llama3-8b", name)
        ...
        m.remount()          # same data dir, fresh daemon
        print(m.status())    # parsed MOUNTPOINT/.kvfs/status

Binaries: KvfsMount(kvfs_bin=..., kvfsctl_bin=...), else env KVFS_BIN / KVFSCTL_BIN, else
build/bin/kvfs and build/bin/kvfsctl relative to the repository root. Temp directories go under
$KVFS_TEST_TMPDIR when set, else the system temp directory.

Every process this module starts is stopped by its PID; a mount it made is unmounted with
`fusermount3 -u` (lazy `-u -z` only when the daemon is already dead).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import random
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

MOUNT_TIMEOUT_S = 20.0
UNMOUNT_TIMEOUT_S = 15.0


def default_kvfs_bin() -> str:
    return os.environ.get("KVFS_BIN") or str(REPO_ROOT / "build" / "bin" / "kvfs")


def default_kvfsctl_bin() -> str:
    return os.environ.get("KVFSCTL_BIN") or str(REPO_ROOT / "build" / "bin" / "kvfsctl")


# ---------------------------------------------------------------------------------------------
# Deterministic content
# ---------------------------------------------------------------------------------------------

_BLOCK = 64 * 1024
_base_cache: dict[bytes, bytes] = {}


def _base_block(seed: bytes) -> bytes:
    """64 KiB of sha256 counter-mode output keyed by seed (cached: a few ms per new name)."""
    base = _base_cache.get(seed)
    if base is None:
        parts = [hashlib.sha256(seed + i.to_bytes(4, "little")).digest()
                 for i in range(_BLOCK // 32)]
        base = b"".join(parts)
        if len(_base_cache) > 4096:
            _base_cache.clear()
        _base_cache[seed] = base
    return base


def chunk_bytes(name: str | bytes, size: int) -> bytes:
    """Deterministic bytes for a chunk named `name`: a pure function of (name, offset).

    Derived from sha256(name) expanded to a 64 KiB block; every 64 KiB block of the result is
    a different rotation of that block stamped with its index, so a misplaced, repeated or
    stale block is detected, and two names never share content. ~1 GB/s: fine for tens of MiB.
    """
    if isinstance(name, str):
        name = name.encode()
    seed = hashlib.sha256(name).digest()
    base = _base_block(seed)
    doubled = base + base
    out = []
    nblocks = (size + _BLOCK - 1) // _BLOCK
    for i in range(nblocks):
        r = (i * 4099 + 8) % _BLOCK
        block = i.to_bytes(8, "little") + seed[:8] + doubled[r:r + _BLOCK - 16]
        out.append(block)
    data = b"".join(out)
    return data[:size]


def file_matches(path: str | os.PathLike, name: str | bytes, size: int | None = None) -> bool:
    """True when the file at path holds exactly chunk_bytes(name, size) (size: the file's)."""
    with open(path, "rb") as f:
        data = f.read()
    if size is not None and len(data) != size:
        return False
    return data == chunk_bytes(name, len(data))


RENAME_NOREPLACE = 1  # linux/fs.h
RENAME_EXCHANGE = 2


def renameat2(a: str | os.PathLike, b: str | os.PathLike, flags: int) -> None:
    """renameat2(2) on two paths (Python has no wrapper); OSError on failure."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(-100, os.fsencode(a), -100, os.fsencode(b), flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), os.fsdecode(a))


def rename_exchange(a: str | os.PathLike, b: str | os.PathLike) -> None:
    """renameat2(a, b, RENAME_EXCHANGE): swaps two names atomically."""
    renameat2(a, b, RENAME_EXCHANGE)


def write_file_atomic(path: str | os.PathLike, data: bytes, tmp_suffix: str | None = None,
                      fsync: bool = False) -> None:
    """Publish like a connector: write a temp file beside path, close, rename over path."""
    path = str(path)
    tmp = path + (tmp_suffix if tmp_suffix is not None else f".tmp.{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)


# ---------------------------------------------------------------------------------------------
# Chunk names
# ---------------------------------------------------------------------------------------------

def prefix_hash_names(token_ids, chunk_tokens: int = 256, include_partial: bool = True,
                      seed: bytes = b"kvfs") -> list[str]:
    """Chained prefix-hash chunk names, the way LMCache (and SGLang HiCache) name KV chunks.

    Chunk i covers token_ids[i*chunk_tokens:(i+1)*chunk_tokens]; its name is
    sha256(name of chunk i-1 || tokens of chunk i) in hex (64 chars), so a name identifies the
    whole prefix up to and including that chunk. LMCache also stores the last partial chunk;
    include_partial=False drops it.
    """
    if chunk_tokens <= 0:
        raise ValueError("chunk_tokens must be positive")
    tokens = list(token_ids)
    names = []
    prev = hashlib.sha256(seed).digest()
    for start in range(0, len(tokens), chunk_tokens):
        piece = tokens[start:start + chunk_tokens]
        if len(piece) < chunk_tokens and not include_partial:
            break
        h = hashlib.sha256(prev)
        for t in piece:
            h.update(int(t).to_bytes(4, "little", signed=False))
        prev = h.digest()
        names.append(prev.hex())
    return names


def lmcache_key(model: str, chunk_hash: str, world_size: int = 1, worker_id: int = 0,
                fmt: str = "pt") -> str:
    """An LMCache-style key string: model@world_size@worker_id@chunk_hash@fmt."""
    return f"{model}@{world_size}@{worker_id}@{chunk_hash}@{fmt}"


# ---------------------------------------------------------------------------------------------
# Mounts
# ---------------------------------------------------------------------------------------------

def mount_count(path: str) -> int:
    """How many mounts are stacked on path (a dead one under a live one counts)."""
    # Bytes, not text: a mount point may have any bytes in its name (mountinfo escapes only
    # space, tab, newline and backslash), and another test's mount is listed here too.
    real = os.fsencode(os.path.realpath(path))
    try:
        with open("/proc/self/mountinfo", "rb") as f:
            return sum(1 for line in f
                       if len(line.split()) > 4 and line.split()[4].replace(b"\\040", b" ") == real)
    except OSError:
        return 0


def _is_mounted(path: str) -> bool:
    return mount_count(path) > 0


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return False


def _pids_with_arg(arg: str) -> list[int]:
    """PIDs of processes whose command line has `arg` as one argument (our unique temp path)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if os.fsencode(arg) in argv and int(entry) != os.getpid():
            pids.append(int(entry))
    return pids


# ---------------------------------------------------------------------------------------------
# Processes
# ---------------------------------------------------------------------------------------------

def freeze(pid: int, timeout: float = 5.0) -> bool:
    """SIGSTOP `pid` and wait until every thread of it has stopped. kill() returns before a
    busy machine gets round to stopping them (etcd under load: up to 11 ms), and a request
    sent meanwhile is still served (the suspected cause of a chmod that a test sent to a
    frozen etcd being committed). False if a thread is still running after `timeout` (one in
    uninterruptible sleep stops only when that ends)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while not _all_threads_stopped(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


def _all_threads_stopped(pid: int) -> bool:
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return True  # gone: nothing of it runs
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                stat = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue  # a thread that ended
        # "tid (comm) S ...": comm may hold spaces and ')', the state follows the last ')'.
        if stat[stat.rfind(")") + 2] not in "TtZX":  # stopped, traced, or dead
            return False
    return True


# ---------------------------------------------------------------------------------------------
# Ports
# ---------------------------------------------------------------------------------------------

def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on host that a server started next can bind.

    Not the kernel's pick (bind to port 0): that comes from the ephemeral range, which every
    outgoing connection on the machine draws from too, so between this check and the server's
    own bind a client socket of another test could take it (CI saw etcd fail with "address
    already in use" that way). A random port below the ephemeral range is taken only by a
    server that asked for it; two tests picking the same one is the remaining (small) race,
    which the starters in kvfs_etcd and kvfs_cluster retry with a new port.
    """
    low = _ephemeral_low()
    lo, hi = max(10000, low - 12000), low - 1
    for _ in range(200):
        port = random.randint(lo, hi) if hi > lo else 0
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise OSError(errno.EADDRINUSE, f"no free port on {host}")


def bind_conflict(log: str) -> bool:
    """Whether a server's log says its listening port was taken (the free_port race)."""
    return "address already in use" in log.lower()


class KvfsError(RuntimeError):
    pass


def file_tail(path: str, nbytes: int) -> str:
    """The last nbytes of a file (a daemon's log), decoded leniently; "" when unreadable."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - nbytes))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


class KvfsMount:
    """A kvfs daemon mounted on a fresh temp mountpoint with a fresh data dir.

    foreground=True runs `kvfs -f` as our child; foreground=False lets kvfs daemonize and finds
    the daemon's PID from .kvfs/status ("pid") or, failing that, by its (unique) mountpoint
    argument in /proc.
    """

    def __init__(self, kvfs_bin: str | None = None, kvfsctl_bin: str | None = None,
                 capacity: str | None = "512M", extra_args=(), foreground: bool = True,
                 root: str | None = None, mnt_name: str = "mnt"):
        self.kvfs_bin = kvfs_bin or default_kvfs_bin()
        self.kvfsctl_bin = kvfsctl_bin or default_kvfsctl_bin()
        self.capacity = capacity
        self.extra_args = list(extra_args)
        self.foreground = foreground
        self.mount_timeout_s = MOUNT_TIMEOUT_S  # how long start() waits for the mount
        parent = root or os.environ.get("KVFS_TEST_TMPDIR") or None
        if parent:
            os.makedirs(parent, exist_ok=True)
        self.root = tempfile.mkdtemp(prefix="kvfs-test-", dir=parent)
        # mnt_name may hold any bytes (os.fsdecode of them) to test odd mount point names.
        self._mnt = os.path.join(self.root, mnt_name)
        self._data = os.path.join(self.root, "data")
        os.mkdir(self._mnt)
        os.mkdir(self._data)
        self.log_path = os.path.join(self.root, "kvfs.log")
        self._proc: subprocess.Popen | None = None
        self._pid: int | None = None
        self._log = None
        self.starts = 0

    # -- properties ---------------------------------------------------------------------------
    @property
    def mnt(self) -> str:
        return self._mnt

    @property
    def data(self) -> str:
        return self._data

    @property
    def pid(self) -> int | None:
        return self._pid

    def alive(self) -> bool:
        """The daemon started and has not exited (a crashed one is a zombie until reaped)."""
        return self._pid is not None and _pid_alive(self._pid)

    def path(self, *parts: str) -> str:
        return os.path.join(self._mnt, *parts)

    def command(self) -> list[str]:
        cmd = [self.kvfs_bin, self._mnt, "--data", self._data]
        if self.capacity is not None:
            cmd += ["--capacity", str(self.capacity)]
        cmd += self.extra_args
        if self.foreground:
            cmd.append("-f")
        return cmd

    # -- lifecycle ----------------------------------------------------------------------------
    def __enter__(self) -> "KvfsMount":
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.cleanup()

    def log_tail(self, nbytes: int = 4000) -> str:
        return file_tail(self.log_path, nbytes)

    def start(self) -> None:
        if self._pid is not None and _pid_alive(self._pid):
            raise KvfsError("kvfs already running")
        self.starts += 1
        self._close_log()  # a failed start left it open
        self._log = open(self.log_path, "ab")
        self._log.write(os.fsencode(f"\n==== start {self.starts}: {' '.join(self.command())}\n"))
        self._log.flush()
        self._proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                      stdout=self._log, stderr=self._log,
                                      start_new_session=True)
        self._pid = self._proc.pid if self.foreground else None
        status_path = os.path.join(self._mnt, ".kvfs", "status")
        deadline = time.monotonic() + self.mount_timeout_s
        while True:
            if os.path.exists(status_path) and _is_mounted(self._mnt):
                break
            rc = self._proc.poll()
            if rc is not None and (self.foreground or rc != 0):
                self._pid = None
                raise KvfsError(f"kvfs exited with {rc} before mounting\n--- log tail ---\n"
                                f"{self.log_tail()}")
            if time.monotonic() > deadline:
                self._stop_after_failed_start()
                raise KvfsError(f"kvfs did not mount within {self.mount_timeout_s:.0f} s\n"
                                f"--- log tail ---\n{self.log_tail()}")
            time.sleep(0.02)
        if not self.foreground:
            self._proc.wait(timeout=self.mount_timeout_s)  # the launcher returns once mounted
            self._pid = self._find_daemon_pid()

    def _find_daemon_pid(self) -> int | None:
        try:
            pid = int(self.status().get("pid", 0))
            if pid > 0 and _pid_alive(pid):
                return pid
        except (OSError, ValueError, TypeError, AttributeError):
            pass
        pids = [p for p in _pids_with_arg(self._mnt) if _pid_alive(p)]
        return pids[0] if pids else None

    def _stop_after_failed_start(self) -> None:
        pid = self._pid or self._find_daemon_pid()
        if pid:
            _kill(pid, signal.SIGKILL)
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        if _is_mounted(self._mnt):
            subprocess.run(["fusermount3", "-u", "-z", self._mnt], stderr=subprocess.DEVNULL)
        self._pid = None

    def _wait_pid(self, pid: int, timeout: float) -> bool:
        """Wait until pid is gone; reaps it when it is our child. True if it exited."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.pid == pid:
                try:
                    self._proc.wait(timeout=0.05)
                    return True
                except subprocess.TimeoutExpired:
                    continue
            if not _pid_alive(pid):
                return True
            time.sleep(0.05)
        return False

    def unmount(self, timeout: float = UNMOUNT_TIMEOUT_S) -> int | None:
        """fusermount3 -u, then wait for the daemon; SIGKILL by PID after timeout.

        Returns the daemon's exit status when it was our child, else None.
        """
        pid = self._pid
        if _is_mounted(self._mnt):
            r = subprocess.run(["fusermount3", "-u", self._mnt], capture_output=True, text=True)
            if r.returncode != 0 and _is_mounted(self._mnt):
                # Busy (an open file somewhere): wait a little, then detach lazily.
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline and _is_mounted(self._mnt):
                    time.sleep(0.1)
                    r = subprocess.run(["fusermount3", "-u", self._mnt], capture_output=True)
                if _is_mounted(self._mnt):
                    subprocess.run(["fusermount3", "-u", "-z", self._mnt],
                                   stderr=subprocess.DEVNULL)
        if pid is not None and not self._wait_pid(pid, timeout):
            _kill(pid, signal.SIGKILL)
            self._wait_pid(pid, 5)
        rc = None
        if self._proc is not None and self.foreground:
            rc = self._proc.poll()
        self._pid = None
        self._close_log()
        return rc

    def terminate(self, timeout: float = UNMOUNT_TIMEOUT_S) -> int | None:
        """SIGTERM the daemon by PID and wait for it; returns its exit status if our child."""
        pid = self._pid
        if pid is None:
            return None
        _kill(pid, signal.SIGTERM)
        if not self._wait_pid(pid, timeout):
            _kill(pid, signal.SIGKILL)
            self._wait_pid(pid, 5)
        if _is_mounted(self._mnt):
            subprocess.run(["fusermount3", "-u", "-z", self._mnt], stderr=subprocess.DEVNULL)
        rc = self._proc.poll() if (self._proc is not None and self.foreground) else None
        self._pid = None
        self._close_log()
        return rc

    def remount(self) -> None:
        self.unmount()
        self.start()

    def kill9(self, detach: bool = True) -> None:
        """SIGKILL the daemon by PID (a crash), then detach the dead mount lazily (unless
        detach is False: the dead mount stays, as after a real crash)."""
        pid = self._pid
        if pid is not None:
            _kill(pid, signal.SIGKILL)
            self._wait_pid(pid, 10)
        if detach and _is_mounted(self._mnt):
            subprocess.run(["fusermount3", "-u", "-z", self._mnt], stderr=subprocess.DEVNULL)
        self._pid = None
        self._close_log()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None

    def cleanup(self) -> None:
        try:
            if self._pid is not None or _is_mounted(self._mnt):
                self.unmount(timeout=10)
        finally:
            # Leftovers we started (e.g. a daemon that forked): matched by our unique mountpoint.
            for pid in _pids_with_arg(self._mnt):
                _kill(pid, signal.SIGKILL)
            if self._proc is not None and self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait()
            if _is_mounted(self._mnt):
                subprocess.run(["fusermount3", "-u", "-z", self._mnt], stderr=subprocess.DEVNULL)
            self._close_log()
            if not _is_mounted(self._mnt):
                shutil.rmtree(self.root, ignore_errors=True)

    # -- inspection ---------------------------------------------------------------------------
    def status(self) -> dict:
        with open(os.path.join(self._mnt, ".kvfs", "status")) as f:
            return json.load(f)

    def kvfsctl(self, *args: str, check: bool = False, timeout: float = 30
                ) -> subprocess.CompletedProcess:
        return subprocess.run([self.kvfsctl_bin, *map(str, args)], capture_output=True,
                              text=True, check=check, timeout=timeout)

    def sh(self, cmd: str, check: bool = True, timeout: float = 60
           ) -> subprocess.CompletedProcess:
        """Run a shell command with cwd = the mountpoint."""
        r = subprocess.run(["bash", "-c", cmd], cwd=self._mnt, capture_output=True, text=True,
                           timeout=timeout)
        if check and r.returncode != 0:
            raise KvfsError(f"command failed ({r.returncode}): {cmd}\nstdout: {r.stdout}\n"
                            f"stderr: {r.stderr}\n--- kvfs log tail ---\n{self.log_tail()}")
        return r


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError as e:
        if e.errno != errno.ESRCH:
            raise


__all__ = [
    "REPO_ROOT", "KvfsMount", "KvfsError", "default_kvfs_bin", "default_kvfsctl_bin",
    "chunk_bytes", "file_matches", "write_file_atomic", "prefix_hash_names", "lmcache_key",
    "free_port", "bind_conflict", "mount_count", "file_tail",
]
