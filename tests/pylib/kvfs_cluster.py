"""A kvfs cluster on one machine for tests: n daemons, each with its own mount and data dir.

Python 3 standard library only. The cluster starts its own etcd (kvfs_etcd.EtcdProcess) on
loopback; node k (1..n) listens on 127.0.0.(k+1) at a free port and finds the others through
etcd; all share one secret file (mode 0600) in the cluster's temp dir unless a test gives a
node a different secret. Each node is a kvfs_testlib.KvfsMount run with the cluster flags as
extra_args, so logs, PIDs and unmounting work as for one mount.

    from kvfs_cluster import KvfsCluster

    with KvfsCluster(n=3, replicas=2) as c:
        c.publish(1, "m/a", data)              # temp file + rename on node 1
        c.wait_exists(3, "m/a")                # polls node 3's mount, with a deadline
        c.kill9(2); c.restart(2)               # crash by PID, same data dir and address
        c.nodes_json(1)                        # parsed MOUNTPOINT/.kvfs/nodes of node 1

Every daemon is stopped by its PID and every mount unmounted at exit (KvfsMount.cleanup).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

from kvfs_etcd import EtcdProcess
from kvfs_testlib import (KvfsError, KvfsMount, bind_conflict, default_kvfs_bin, default_kvfsctl_bin,
                          free_port, write_file_atomic)

# Short failure detection so a test sees a killed node as down within a few seconds.
DEFAULT_REQUEST_TIMEOUT_MS = 1000
DEFAULT_LEASE_TTL_S = 3


def node_host(node_id: int) -> str:
    """Loopback address of node k: 127.0.0.(k+1); 127.0.0.2..127.0.0.9 need no setup."""
    if not 1 <= node_id <= 8:
        raise ValueError(f"node id {node_id} outside 1..8 (loopback 127.0.0.2..9)")
    return f"127.0.0.{node_id + 1}"


class WaitTimeout(AssertionError):
    """A wait_* helper ran past its deadline (an AssertionError: unittest reports a failure)."""


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.05, what: str = "condition"):
    """Poll predicate() until it returns a truthy value (returned) or raise WaitTimeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise WaitTimeout(f"{what}: not true within {timeout:.1f} s")
        time.sleep(interval)


class KvfsNode:
    """One daemon of the cluster: its id, address, port and KvfsMount."""

    def __init__(self, node_id: int, host: str, port: int, mount: KvfsMount):
        self.id = node_id
        self.host = host
        self.port = port
        self.mount = mount
        self.started = False

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def mnt(self) -> str:
        return self.mount.mnt

    @property
    def pid(self) -> int | None:
        return self.mount.pid

    def path(self, rel: str = "") -> str:
        return os.path.join(self.mount.mnt, rel) if rel else self.mount.mnt

    def running(self) -> bool:
        """Started and still alive (not crashed, not stopped)."""
        return self.mount.alive()


class KvfsCluster:
    """n kvfs daemons on loopback forming one cluster.

    replicas: --replicas R. request_timeout_ms: --request-timeout. secrets: {node id: bytes}
    gives a node its own secret file (e.g. a wrong one). extra_args: passed to every node;
    node_args: {node id: [...]} to one node. start_nodes: ids started by start() (default all;
    others can be started later with start_node). etcd_host: the address etcd serves clients
    on; hosts: {node id: address} instead of 127.0.0.(k+1); node_kvfs_bin: {node id: program}
    run instead of kvfs (kvfs_netns.NetnsHost.wrapper() starts a node in its own namespace).
    """

    def __init__(self, n: int = 3, replicas: int = 2, capacity: str = "256M",
                 request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS, transport: str = "tcp",
                 extra_args=(), node_args: dict | None = None, secrets: dict | None = None,
                 kvfs_bin: str | None = None, kvfsctl_bin: str | None = None,
                 start_nodes=None, lease_ttl_s: int = DEFAULT_LEASE_TTL_S,
                 etcd_host: str = "127.0.0.1", hosts: dict | None = None,
                 node_kvfs_bin: dict | None = None):
        if not 1 <= n <= 8:
            raise ValueError("n must be 1..8")
        self.n = n
        self.replicas = replicas
        self.capacity = capacity
        self.request_timeout_ms = request_timeout_ms
        self.transport = transport
        self.extra_args = list(extra_args)
        self.node_args = dict(node_args or {})
        self.kvfs_bin = kvfs_bin or default_kvfs_bin()
        self.kvfsctl_bin = kvfsctl_bin or default_kvfsctl_bin()
        self.start_nodes = list(start_nodes) if start_nodes is not None else None
        # Node k reaches etcd here instead (a relay, kvfs_relay.TcpRelay); set before it starts.
        self.etcd_endpoint_of: dict[int, str] = {}
        self.lease_ttl_s = lease_ttl_s
        parent = os.environ.get("KVFS_TEST_TMPDIR") or None
        if parent:
            os.makedirs(parent, exist_ok=True)
        self.root = tempfile.mkdtemp(prefix="kvfs-cluster-", dir=parent)
        self.etcd = EtcdProcess(self.root, etcd_host)
        self.secret_file = self._write_secret("secret", os.urandom(32).hex().encode())
        self._secret_of = {}
        for node_id, secret in (secrets or {}).items():
            self._secret_of[node_id] = self._write_secret(f"secret-{node_id}", secret)
        self.nodes: dict[int, KvfsNode] = {}
        hosts = dict(hosts or {})
        self.node_kvfs_bin = dict(node_kvfs_bin or {})
        for k in range(1, n + 1):
            host = hosts.get(k) or node_host(k)
            self.nodes[k] = KvfsNode(k, host, self._free_port(host), None)
        for k, node in self.nodes.items():
            node.mount = KvfsMount(kvfs_bin=self.node_kvfs_bin.get(k, self.kvfs_bin),
                                   kvfsctl_bin=self.kvfsctl_bin,
                                   capacity=capacity, extra_args=self._args(k),
                                   root=self.root)

    # -- configuration ------------------------------------------------------------------------
    @staticmethod
    def _free_port(host: str) -> int:
        # A node in another network namespace listens on an address this one does not have:
        # any port is free there.
        try:
            return free_port(host)
        except OSError:
            return free_port()

    def _write_secret(self, name: str, data: bytes) -> str:
        path = os.path.join(self.root, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        return path

    def _args(self, k: int) -> list[str]:
        node = self.nodes[k]
        args = ["--node-id", str(k), "--listen", node.address,
                "--replicas", str(self.replicas),
                "--secret-file", self._secret_of.get(k, self.secret_file),
                "--transport", self.transport,
                "--request-timeout", str(self.request_timeout_ms),
                "--etcd", self.etcd_endpoint_of.get(k, self.etcd.endpoint),
                "--lease-ttl", str(self.lease_ttl_s)]
        level = os.environ.get("KVFS_TEST_LOG_LEVEL")  # e.g. debug, to trace a flaky case
        if level:
            args += ["--log-level", level]
        return args + self.extra_args + list(self.node_args.get(k, ()))

    def set_secret(self, k: int, secret: bytes | None) -> None:
        """Give node k its own secret (None: the cluster's) from its next start on."""
        if secret is None:
            self._secret_of.pop(k, None)
        else:
            self._secret_of[k] = self._write_secret(f"secret-{k}", secret)
        self.nodes[k].mount.extra_args = self._args(k)

    # -- lifecycle ----------------------------------------------------------------------------
    def __enter__(self) -> "KvfsCluster":
        try:
            self.start()
        except BaseException:
            self.cleanup()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.cleanup()

    def start(self) -> None:
        if self.etcd.proc is None:
            self.etcd.start()
        started = self.start_nodes if self.start_nodes is not None else list(self.nodes)
        for k in started:
            self.start_node(k)
        self.wait_joined(started)

    def wait_joined(self, ids, timeout: float = 15.0) -> None:
        """Wait until each of the nodes `ids` lists every other one "up". A node places a
        chunk's replicas on the nodes its membership watch has shown it: a publish in the
        moment before the watch shows a peer that just registered lands with fewer than R
        copies (repair adds the rest later), which a test that counts holders must not meet."""
        want = sorted(ids)
        for k in want:
            others = {j: "up" for j in want if j != k}
            wait_until(lambda: {j: s for j, s in self.node_states(k).items() if j in others}
                       == others, timeout, 0.05, what=f"node {k} sees nodes {sorted(others)} up")

    def start_node(self, k: int) -> None:
        """Start node k. Its first start, if another test took its port since free_port picked
        it, tries again on a new port; later starts keep the port (peers know it)."""
        node = self.nodes[k]
        for attempt in range(5):
            node.mount.extra_args = self._args(k)  # etcd's first start may have moved it too
            try:
                node.mount.start()
                node.started = True
                return
            except KvfsError as e:
                if node.started or attempt == 4 or not bind_conflict(str(e)):
                    raise
                node.port = self._free_port(node.host)

    def kill9(self, k: int) -> None:
        """Crash node k: SIGKILL by PID, then detach its dead mount."""
        self.nodes[k].mount.kill9()

    def restart(self, k: int) -> None:
        """Start node k again with the same data dir, address and port."""
        self.start_node(k)

    def stop(self, k: int) -> None:
        """Clean stop of node k (fusermount3 -u, wait for the daemon)."""
        self.nodes[k].mount.unmount()

    def cleanup(self) -> None:
        """Stops every daemon and etcd (by PID), unmounts and removes the data. Each step runs
        whatever the others did: a log that could not be kept (KVFS_TEST_KEEP_LOGS naming a
        directory that does not exist) used to skip every node's stop, leaving the daemons
        running and mounted. The first error is raised at the end."""
        errors: list[BaseException] = []

        def attempt(step) -> None:
            try:
                step()
            except Exception as e:  # reported below, after every step ran
                errors.append(e)
        attempt(self._keep_logs)
        attempt(self.etcd.resume)  # a test may have left it frozen; daemons leave through it
        for node in self.nodes.values():
            if node.mount is not None:
                attempt(node.mount.cleanup)
        attempt(self.etcd.stop)
        shutil.rmtree(self.root, ignore_errors=True)
        if errors:
            raise errors[0]

    def _keep_logs(self) -> None:
        """KVFS_TEST_KEEP_LOGS=dir: copy every node's log there before the data goes."""
        keep = os.environ.get("KVFS_TEST_KEEP_LOGS")
        if not keep:
            return
        os.makedirs(keep, exist_ok=True)
        dest = tempfile.mkdtemp(prefix="cluster-", dir=keep)
        for k, node in self.nodes.items():
            if node.mount is not None and os.path.exists(node.mount.log_path):
                shutil.copy(node.mount.log_path, os.path.join(dest, f"node{k}.log"))

    # -- files --------------------------------------------------------------------------------
    def node(self, k: int) -> KvfsNode:
        return self.nodes[k]

    def path(self, k: int, rel: str = "") -> str:
        return self.nodes[k].path(rel)

    def publish(self, k: int, rel: str, data: bytes, tmp_suffix: str | None = None) -> str:
        """Write data to a temp name beside rel on node k, close, rename over rel."""
        path = self.path(k, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_file_atomic(path, data, tmp_suffix=tmp_suffix)
        return path

    def wait_exists(self, k: int, rel: str, timeout: float = 10.0) -> None:
        path = self.path(k, rel)
        wait_until(lambda: os.path.lexists(path), timeout, what=f"{rel} appears on node {k}")

    def wait_gone(self, k: int, rel: str, timeout: float = 10.0) -> None:
        path = self.path(k, rel)
        wait_until(lambda: not os.path.lexists(path), timeout,
                   what=f"{rel} disappears from node {k}")

    def read_in_subprocess(self, k: int, rel: str, timeout: float = 30.0) -> dict:
        """Read a whole file on node k in a child process killed after timeout, so a hung
        read cannot hang the test. Returns {"ok": bool, "errno": int|None, "data": bytes|None,
        "seconds": float, "timed_out": bool, "read_seconds": float|None}: "seconds" from the
        child's start to its end, "read_seconds" its open and read alone (without the
        interpreter's start, which a loaded machine stretches)."""
        return read_file_in_subprocess(self.path(k, rel), timeout)

    # -- control surface ----------------------------------------------------------------------
    def nodes_json(self, k: int) -> dict:
        with open(os.path.join(self.nodes[k].mnt, ".kvfs", "nodes")) as f:
            return json.load(f)

    def node_states(self, k: int) -> dict[int, str]:
        """{node id: state} as node k sees the cluster."""
        return {int(n["id"]): n["state"] for n in self.nodes_json(k)["nodes"]}

    def wait_state(self, observer: int, k: int, state: str, timeout: float = 15.0) -> None:
        wait_until(lambda: self.node_states(observer).get(k) == state, timeout, 0.1,
                   what=f"node {observer} sees node {k} {state}")

    def location(self, k: int, rel: str) -> dict:
        """The user.kvfs.location xattr of rel on node k, parsed."""
        return json.loads(os.getxattr(self.path(k, rel), "user.kvfs.location"))

    def kvfsctl(self, *args, timeout: float = 30) -> subprocess.CompletedProcess:
        return subprocess.run([self.kvfsctl_bin, *map(str, args)], capture_output=True,
                              text=True, timeout=timeout)

    def log(self, k: int) -> str:
        try:
            with open(self.nodes[k].mount.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def logs_tail(self, nbytes: int = 2000) -> str:
        return "\n".join([f"--- node {k} log tail ---\n{n.mount.log_tail(nbytes)}"
                          for k, n in self.nodes.items()] +
                         [f"--- etcd log tail ---\n{self.etcd.log_tail(nbytes)}"])


_READER = r"""
import errno, os, sys, time
t0 = time.monotonic()
try:
    with open(sys.argv[1], "rb") as f:
        data = f.read()
    sys.stdout.buffer.write(b"OK %.6f\n" % (time.monotonic() - t0) + data)
except OSError as e:
    sys.stdout.buffer.write(b"ERR %d %.6f\n" % (e.errno, time.monotonic() - t0))
"""


def read_file_in_subprocess(path: str, timeout: float = 30.0) -> dict:
    """See KvfsCluster.read_in_subprocess. The child is killed by its PID on timeout."""
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", _READER, path], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"ok": False, "errno": None, "data": None, "timed_out": True,
                "seconds": time.monotonic() - t0, "read_seconds": None}
    seconds = time.monotonic() - t0
    head, _, rest = out.partition(b"\n")
    fields = head.split()
    if len(fields) == 2 and fields[0] == b"OK":
        return {"ok": True, "errno": None, "data": rest, "timed_out": False, "seconds": seconds,
                "read_seconds": float(fields[1])}
    if len(fields) == 3 and fields[0] == b"ERR":
        return {"ok": False, "errno": int(fields[1]), "data": None, "timed_out": False,
                "seconds": seconds, "read_seconds": float(fields[2])}
    return {"ok": False, "errno": None, "data": None, "timed_out": False, "seconds": seconds,
            "read_seconds": None, "output": out}


__all__ = ["KvfsCluster", "KvfsNode", "WaitTimeout", "wait_until", "node_host", "free_port",
           "read_file_in_subprocess", "DEFAULT_REQUEST_TIMEOUT_MS"]


def _test_failed(test) -> bool:
    """Whether a unittest case has failed so far (True when unittest does not say)."""
    result = getattr(getattr(test, "_outcome", None), "result", None)
    if result is None:
        return True
    return any(t is test for t, _ in list(result.failures) + list(result.errors))


def start_cluster(test, **kw) -> "KvfsCluster":
    """Starts a KvfsCluster for a unittest case and registers its cleanup, which prints the
    nodes' log tails first when the case failed."""
    c = KvfsCluster(**kw)

    def stop():
        if _test_failed(test):
            print(c.logs_tail(3000), file=sys.stderr)
        c.cleanup()
    test.addCleanup(stop)
    c.start()
    return c
