"""A real etcd (Debian's etcd-server) for one test: loopback, free ports, its own data dir.

Python 3 standard library only. Started and stopped by PID; KVFS_ETCD_BIN overrides the binary.

    from kvfs_etcd import EtcdProcess

    etcd = EtcdProcess(root)        # root: a temp dir the caller removes
    etcd.start()
    etcd.endpoint                   # "http://127.0.0.1:PORT"
    etcd.pause(); etcd.resume()     # SIGSTOP / SIGCONT: a frozen etcd
    etcd.kill9(); etcd.start()      # a crash and a restart on the same ports and data
    etcd.compact()                  # compacts the history up to the current revision
    etcd.stop()

    members = etcd_members(root, 3) # one etcd cluster of three members, each an EtcdProcess
    start_members(members)          # (every member's own start waits for a quorum)
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request

from kvfs_testlib import bind_conflict, file_tail, free_port, freeze


def etcd_binary() -> str | None:
    return os.environ.get("KVFS_ETCD_BIN") or shutil.which("etcd") or (
        "/usr/bin/etcd" if os.path.exists("/usr/bin/etcd") else None)


class EtcdProcess:
    def __init__(self, root: str, host: str = "127.0.0.1", name: str = "kvfs-test"):
        self.name = name
        self.dir = os.path.join(root, "etcd" if name == "kvfs-test" else f"etcd-{name}")
        self.host = host  # clients' address (a network namespace's node needs a veth one)
        self.client_port = free_port(host)
        self.peer_port = free_port()
        self.proc: subprocess.Popen | None = None
        self.started = False  # after the first start the ports are fixed: clients know them
        self.log_path = self.dir + ".log"
        # The members of its etcd cluster (etcd_members); None: a cluster of its own.
        self.members: list[EtcdProcess] | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.client_port}"

    def start(self, timeout: float = 20.0) -> None:
        """Start etcd and wait until it answers. A first start whose port another test took
        in the meantime (see free_port) tries again on new ports."""
        for attempt in range(5):
            try:
                self._start_once(timeout)
                self.started = True
                return
            except RuntimeError as e:
                if self.started or attempt == 4 or not bind_conflict(str(e)):
                    raise
                self.client_port = free_port(self.host)
                self.peer_port = free_port()

    def _start_once(self, timeout: float) -> None:
        self.launch()
        self.wait_ready(timeout)

    def launch(self) -> None:
        """Starts the process without waiting for it to answer."""
        binary = etcd_binary()
        if not binary:
            raise RuntimeError("etcd not found (install etcd-server, or set KVFS_ETCD_BIN)")
        os.makedirs(self.dir, exist_ok=True)
        url = self.endpoint
        peer = f"http://127.0.0.1:{self.peer_port}"
        initial = ",".join(f"{m.name}=http://127.0.0.1:{m.peer_port}"
                           for m in (self.members or [self]))
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [binary, "--name", self.name, "--data-dir", self.dir,
             "--listen-client-urls", url, "--advertise-client-urls", url,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", initial, "--log-level", "warn"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()

    def wait_ready(self, timeout: float) -> None:
        """Waits until it answers a read (a member: once its cluster has a leader)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.proc = None
                raise RuntimeError(f"etcd exited at start:\n{self.log_tail()}")
            try:
                self.call("/v3/kv/range", {"key": base64.b64encode(b"/").decode()}, 1.0)
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"etcd did not answer within {timeout} s:\n{self.log_tail()}")

    def call(self, path: str, body: dict, timeout: float = 5.0) -> dict:
        req = urllib.request.Request(self.endpoint + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read() or b"{}")

    def range_prefix(self, prefix: str) -> list[tuple[str, bytes]]:
        """Every key under `prefix` with its value, in key order."""
        end = prefix[:-1] + chr(ord(prefix[-1]) + 1)
        r = self.call("/v3/kv/range", {"key": base64.b64encode(prefix.encode()).decode(),
                                       "range_end": base64.b64encode(end.encode()).decode()})
        return [(base64.b64decode(kv["key"]).decode(), base64.b64decode(kv["value"]))
                for kv in r.get("kvs", [])]

    def revision(self) -> int:
        r = self.call("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})
        return int(r["header"]["revision"])

    def compact(self) -> int:
        rev = self.revision()
        self.call("/v3/kv/compaction", {"revision": rev, "physical": True})
        return rev

    def pause(self) -> None:
        if self.proc and self.proc.poll() is None:
            freeze(self.proc.pid)

    def resume(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)

    def kill9(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        if not self.proc:
            return
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
                os.kill(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None

    def log_tail(self, nbytes: int = 2000) -> str:
        return file_tail(self.log_path, nbytes)


def etcd_members(root: str, n: int) -> list[EtcdProcess]:
    """n members of one etcd cluster on loopback (not started: start_members)."""
    members = [EtcdProcess(root, name=f"member{i}") for i in range(n)]
    for m in members:
        m.members = members
    return members


def endpoints(members: list[EtcdProcess]) -> str:
    """The members' client URLs, as kvfs --etcd takes them."""
    return ",".join(m.endpoint for m in members)


def start_members(members: list[EtcdProcess], timeout: float = 30.0) -> None:
    """Starts every member, then waits for each (a member alone has no quorum to answer)."""
    for m in members:
        m.launch()
    for m in members:
        m.wait_ready(timeout)
        m.started = True
