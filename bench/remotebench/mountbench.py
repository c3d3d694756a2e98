#!/usr/bin/env python3
"""remotebench through real mounts: node 2 reads whole chunks that only node 1 holds, through
its FUSE mount with the page cache dropped, beside iperf3 one stream (the wire's ceiling) and
Redis GET of the same objects (a key-value store doing the same job), all in one run.

Two kvfs daemons with their own mounts on loopback (127.0.0.2, 127.0.0.3) share one etcd started
for the run (tests/pylib/kvfs_cluster.py), R=1; every object is published on node 1 and checked
to have node 1 as its only holder. Before each timed pass the page cache is dropped
(/proc/sys/vm/drop_caches, root only: pass --no-drop-caches to skip, and the kvfs column then
measures re-reads). One reader reads each object whole (open, readinto a buffer of the object's
size, close), as a connector loads a chunk; with --readers N, N threads each read their share
of the objects that way at once (Redis gets N connections; iperf3 stays one stream). Node 2 has opened every object before (the
byte-exact check), so its opens keep the page cache; with --first-open node 2 restarts before
each pass and every open is its first of that version, as a connector's first load of a chunk
another node wrote (the store then starts the fetch at open). CPU s/GiB: kvfs counts both daemons and the reader;
redis counts the server and its client. Everything started here is stopped by PID.

The numbers are for this machine (2 cores shared by both daemons, etcd, the reader and the
baselines): compare the columns of one run, not runs on different machines.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "pylib"))

from kvfs_cluster import KvfsCluster, free_port, wait_until  # noqa: E402
from kvfs_testlib import write_file_atomic  # noqa: E402

MiB = 1 << 20
GiB = 1 << 30


def proc_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def self_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def drop_caches(enabled: bool) -> None:
    if not enabled:
        return
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def object_bytes(size: int, index: int) -> bytes:
    return random.Random(size * 1000 + index).randbytes(size)


def iperf3_one_stream(seconds: int, work: str) -> float:
    """Bytes per second of one iperf3 TCP stream on 127.0.0.1."""
    port = free_port("127.0.0.1")
    log = os.path.join(work, "iperf3-server.log")
    with open(log, "w") as out:
        server = subprocess.Popen(["iperf3", "-s", "-1", "--forceflush", "-B", "127.0.0.1",
                                   "-p", str(port)], stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: "listening" in open(log).read(), 5.0, what="iperf3 server listening")
        r = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-J", "-t",
                            str(seconds), "-P", "1"], capture_output=True, text=True,
                           timeout=seconds + 20)
        if r.returncode != 0:
            raise RuntimeError(f"iperf3 client: {r.stdout[-500:]} {r.stderr[-500:]}")
        return json.loads(r.stdout)["end"]["sum_received"]["bits_per_second"] / 8
    finally:
        server.kill()
        server.wait()


class Redis:
    """redis-server on 127.0.0.1 and a minimal RESP client (SET, GET into a buffer)."""

    def __init__(self, work: str):
        self.port = free_port("127.0.0.1")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", work,
             "--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", ""],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.others: list[Redis] = []
        deadline = time.monotonic() + 10
        while True:
            try:
                self._connect()
                break
            except OSError:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("redis-server did not start (is it installed?)")
                time.sleep(0.05)

    def _connect(self) -> None:
        self.sock = socket.create_connection(("127.0.0.1", self.port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rfile = self.sock.makefile("rb", buffering=1 << 20)

    def client(self) -> "Redis":
        """Another connection to the same server (one per reader thread)."""
        other = Redis.__new__(Redis)
        other.proc, other.port, other.others = self.proc, self.port, []
        other._connect()
        self.others.append(other)
        return other

    def stop(self) -> None:
        for other in self.others:
            other.sock.close()
        if getattr(self, "sock", None):
            self.sock.close()
        self.proc.kill()
        self.proc.wait()

    def _command(self, *parts: bytes) -> None:
        msg = [b"*%d\r\n" % len(parts)]
        for p in parts:
            msg.append(b"$%d\r\n" % len(p))
            msg.append(p)
            msg.append(b"\r\n")
        self.sock.sendall(b"".join(msg))

    def set(self, key: str, value: bytes) -> None:
        self._command(b"SET", key.encode(), value)
        line = self.rfile.readline()
        if not line.startswith(b"+OK"):
            raise RuntimeError(f"redis SET: {line!r}")

    def get_into(self, key: str, buf: memoryview) -> int:
        self._command(b"GET", key.encode())
        line = self.rfile.readline()
        if not line.startswith(b"$"):
            raise RuntimeError(f"redis GET: {line!r}")
        n = int(line[1:])
        done = 0
        while done < n:
            got = self.rfile.readinto(buf[done:n])
            if not got:
                raise RuntimeError("redis closed the connection")
            done += got
        self.rfile.read(2)
        return n

    def cpu_seconds(self) -> float:
        return proc_cpu_seconds(self.proc.pid)


def split(names: list[str], readers: int) -> list[list[str]]:
    return [names[i::readers] for i in range(readers)]


def run_readers(work, shares: list, size: int) -> float:
    """Runs work(share, buffer) on one thread per share; returns the seconds they took."""
    errors: list[BaseException] = []

    def one(share):
        try:
            work(share, memoryview(bytearray(size)))
        except BaseException as e:  # reported by the caller
            errors.append(e)

    threads = [threading.Thread(target=one, args=(share,)) for share in shares]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    secs = time.monotonic() - t0
    if errors:
        raise errors[0]
    return secs


def read_mount_pass(c: KvfsCluster, names: list[str], size: int,
                    readers: int) -> tuple[float, float]:
    """One pass over every object through node 2's mount: (bytes/s, CPU s/GiB)."""
    pids = [c.node(k).pid for k in c.nodes]

    def work(share, view):
        for name in share:
            with open(c.path(2, name), "rb", buffering=0) as f:
                done = 0
                while done < size:
                    n = f.readinto(view[done:size])
                    if not n:
                        raise RuntimeError(f"{name}: short read at {done}")
                    done += n

    cpu0 = sum(proc_cpu_seconds(p) for p in pids) + self_cpu_seconds()
    secs = run_readers(work, split(names, readers), size)
    cpu = sum(proc_cpu_seconds(p) for p in pids) + self_cpu_seconds() - cpu0
    moved = size * len(names)
    return moved / secs, cpu / (moved / GiB)


def redis_pass(clients: list[Redis], keys: list[str], size: int) -> tuple[float, float]:
    def work(share, view):
        client, share_keys = share
        for key in share_keys:
            if client.get_into(key, view) != size:
                raise RuntimeError(f"redis GET {key}: wrong size")

    cpu0 = clients[0].cpu_seconds() + self_cpu_seconds()
    secs = run_readers(work, list(zip(clients, split(keys, len(clients)))), size)
    cpu = clients[0].cpu_seconds() + self_cpu_seconds() - cpu0
    moved = size * len(keys)
    return moved / secs, cpu / (moved / GiB)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2, 8, 32], help="object MiB")
    ap.add_argument("--set-mib", type=int, default=256, help="bytes of objects per size (MiB)")
    ap.add_argument("--repeat", type=int, default=3, help="timed passes per cell (median)")
    ap.add_argument("--iperf-seconds", type=int, default=3)
    ap.add_argument("--no-drop-caches", action="store_true")
    ap.add_argument("--first-open", action="store_true",
                    help="restart node 2 before each pass: every open is its first")
    ap.add_argument("--readers", type=int, default=1,
                    help="reader threads, each reading its share of the objects (Redis gets as "
                         "many connections); iperf3 stays one stream")
    ap.add_argument("--json", help="write the rows here as JSON")
    args = ap.parse_args()
    if args.readers < 1:
        ap.error("--readers must be >= 1")
    drop = not args.no_drop_caches
    if drop and os.geteuid() != 0:
        print("mountbench: dropping the page cache needs root (or pass --no-drop-caches)",
              file=sys.stderr)
        return 2

    work = tempfile.mkdtemp(prefix="kvfs-mountbench-")
    capacity_mib = max(512, 2 * args.set_mib * len(args.sizes))
    c = KvfsCluster(n=2, replicas=1, capacity=f"{capacity_mib}M")
    redis = None
    rows = []
    try:
        c.start()
        redis = Redis(work)
        redis_clients = [redis] + [redis.client() for _ in range(args.readers - 1)]
        print("mountbench: node 2 reads whole chunks only node 1 holds, through its mount"
              f" (page cache {'dropped' if drop else 'kept'} before each pass"
              f"{', node 2 restarted: first opens' if args.first_open else ''};"
              f" {args.readers} reader{'s' if args.readers > 1 else ''})")
        print(f"{args.set_mib} MiB per size, median of {args.repeat}; load average at start:"
              f" {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
        header = ("size", "kvfs", "iperf3", "ratio", "redis", "ratio", "kvfs_cpu", "redis_cpu")
        print("%5s %8s %8s %6s %8s %6s %9s %9s" % header)
        print("%5s %8s %8s %6s %8s %6s %9s %9s" % ("MiB", "GB/s", "GB/s", "", "GB/s", "",
                                                   "s/GiB", "s/GiB"))
        for size_mib in args.sizes:
            size = size_mib * MiB
            count = max(2, args.set_mib // size_mib)
            names = [f"s{size_mib}/o{i}" for i in range(count)]
            os.makedirs(c.path(1, f"s{size_mib}"), exist_ok=True)
            for i, name in enumerate(names):
                data = object_bytes(size, i)
                write_file_atomic(c.path(1, name), data)
                redis.set(name, data)
            for name in names:
                c.wait_exists(2, name, 10.0)
                loc = c.location(2, name)
                holders = [h["id"] for h in loc["holders"]]
                if holders != [1] or loc["local"]:
                    raise RuntimeError(f"{name} is not held by node 1 alone: {loc}")
            for i, name in enumerate(names):  # byte-exact once, before anything is timed
                with open(c.path(2, name), "rb") as f:
                    if f.read() != object_bytes(size, i):
                        raise RuntimeError(f"{name}: node 2 read wrong bytes")
            kv, kv_cpu, rd, rd_cpu, ip = [], [], [], [], []
            for _ in range(args.repeat):
                ip.append(iperf3_one_stream(args.iperf_seconds, work))
                if args.first_open:
                    c.stop(2)
                    c.restart(2)
                    c.wait_state(2, 1, "up", 30.0)
                    for name in names:
                        c.wait_exists(2, name, 30.0)
                drop_caches(drop)
                rate, cpu = read_mount_pass(c, names, size, args.readers)
                kv.append(rate)
                kv_cpu.append(cpu)
                rate, cpu = redis_pass(redis_clients, names, size)
                rd.append(rate)
                rd_cpu.append(cpu)
            row = {"size_mib": size_mib, "readers": args.readers, "kvfs": statistics.median(kv) / 1e9,
                   "iperf3": statistics.median(ip) / 1e9, "redis": statistics.median(rd) / 1e9,
                   "kvfs_cpu_s_per_gib": statistics.median(kv_cpu),
                   "redis_cpu_s_per_gib": statistics.median(rd_cpu)}
            rows.append(row)
            print("%5d %8.2f %8.2f %6.2f %8.2f %6.2f %9.3f %9.3f" % (
                size_mib, row["kvfs"], row["iperf3"], row["kvfs"] / row["iperf3"], row["redis"],
                row["kvfs"] / row["redis"], row["kvfs_cpu_s_per_gib"],
                row["redis_cpu_s_per_gib"]), flush=True)
            for name in names:
                os.unlink(c.path(1, name))
        print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    except BaseException:
        print(c.logs_tail(4000), file=sys.stderr)
        raise
    finally:
        if redis is not None:
            redis.stop()
        c.cleanup()
        subprocess.run(["rm", "-rf", work], check=False)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
