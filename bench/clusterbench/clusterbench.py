#!/usr/bin/env python3
"""clusterbench: the cluster's namespace at 1, 4 and 8 nodes on this machine, beside a single
node without etcd (the baseline), as ratios from the same run.

Every node is a real kvfs daemon with its own mount on loopback, sharing one etcd started for
the run (tests/pylib/kvfs_cluster.py); everything is stopped by PID at the end. Rows:

  publish/s, one node      4 KiB files published through node 1 (temp file + rename, as
                           connectors do) by --threads threads
  changes, transactions    during the one-node run: namespace changes node 1 made per publish
                           and the etcd transactions that carried them (kvfsctl nodes): fewer
                           transactions than changes is group commit at work
  CPU ms/publish           during the one-node run: CPU time per publish of the publishing
                           daemon, of each other daemon (the mean: applying the change from
                           the watch, and on the chunk's second holder (R=2) storing its
                           copy), of etcd and of the bench's own threads. On this
                           2-core machine their sum bounds the rate: 2000 ms / sum is the
                           most publishes a second can hold
  publish/s, all nodes     the same on every node at once, summed
  visible p50 / p99 (ms)   from rename() returning on node 1 to stat() finding the name on the
                           last node (which polls the name every 0.5 ms)
  meta B/publish/node      bytes the daemons wrote to disk (/proc/PID/io write_bytes) beyond
                           the file data itself, per publish and node, at two namespace sizes
                           (--names and 11x that): flat means no rewrite grows with the names.
                           The single node writes its namespace to its own journal; a cluster
                           node writes only the journal record of the chunk it holds (the
                           namespace is in etcd: the next row)
  etcd B written/publish   bytes etcd wrote (its WAL and database) per publish
  etcd B/name              etcd's database size per name
  RSS B/name               daemon memory per name (RSS after loading --big-names names minus
                           RSS before, on a node that joins late)
  late joiner s            a node started after --big-names names exist: start to a full
                           listing
  seeded late joiner, RSS  with --seed-names N: the same two rows over N names committed
                           straight into etcd by kvfs-seed-names (hours of FUSE publishes
                           otherwise), 64-character names, each file with a chunk layout
  repair s                 kill -9 of one of 4 nodes holding --repair-mib MiB of chunks
                           (R=2): until every chunk has 2 live holders again, beside the
                           target (data / 100 MiB/s + 30 s)

The numbers are for this machine (2 cores shared by every daemon, etcd and the clients): they
show how the cost scales with the number of nodes, not what a real cluster does.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "pylib"))

import kvfs_testlib  # noqa: E402
from kvfs_cluster import KvfsCluster, wait_until  # noqa: E402
from kvfs_testlib import KvfsMount, default_kvfs_bin, write_file_atomic  # noqa: E402

PAYLOAD = b"k" * 4096


def write_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("write_bytes:"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time the process has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


ONE_DIR = False  # --one-dir: every thread publishes into one directory, as a connector does


def publish_many(root: str, prefix: str, count: int, threads: int) -> float:
    """Publishes count files under root/prefix.../ from `threads` threads; returns files/s."""
    per = count // threads

    def work(t):
        d = os.path.join(root, prefix if ONE_DIR else f"{prefix}{t}")
        os.makedirs(d, exist_ok=True)
        for i in range(per):
            write_file_atomic(os.path.join(d, f"f{t}-{i}"), PAYLOAD, tmp_suffix=".tmp")
    ts = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return per * threads / (time.monotonic() - t0)


def single_node(args) -> dict:
    m = KvfsMount(capacity="2G")
    try:
        m.start()
        cpu0, client0 = cpu_seconds(m.pid), cpu_seconds(os.getpid())
        rate = publish_many(m.mnt, "s", args.files, args.threads)
        cpu_self = (cpu_seconds(m.pid) - cpu0) * 1000 / args.files
        cpu_client = (cpu_seconds(os.getpid()) - client0) * 1000 / args.files
        before = write_bytes(m.pid)
        publish_many(m.mnt, "m", args.names, args.threads)
        after = write_bytes(m.pid)
        meta = max(0, after - before - args.names * len(PAYLOAD)) / args.names
        return {"publish_one": rate, "meta_small": meta, "cpu_self": cpu_self,
                "cpu_client": cpu_client, "cpu_sum": cpu_self + cpu_client}
    finally:
        m.cleanup()


def visibility(c: KvfsCluster, samples: int) -> tuple[float, float]:
    last = c.n
    os.makedirs(c.path(1, "vis"), exist_ok=True)
    wait_until(lambda: os.path.isdir(c.path(last, "vis")), 10.0)
    lat = []
    for i in range(samples):
        target = c.path(last, f"vis/v{i}")
        write_file_atomic(c.path(1, f"vis/v{i}"), PAYLOAD, tmp_suffix=".tmp")
        t0 = time.monotonic()
        while not os.path.exists(target):
            if time.monotonic() - t0 > 10:
                raise RuntimeError(f"vis/v{i} not visible on node {last} within 10 s")
            time.sleep(0.0005)
        lat.append((time.monotonic() - t0) * 1000)
    lat.sort()
    return lat[len(lat) // 2], lat[min(len(lat) - 1, int(len(lat) * 0.99))]


def meta_bytes(c: KvfsCluster, count: int, threads: int, tag: str) -> tuple[float, float]:
    """(bytes per publish per kvfs node beyond the data, bytes etcd wrote per publish)."""
    pids = [c.node(k).pid for k in c.nodes]
    before = sum(write_bytes(p) for p in pids)
    etcd_before = write_bytes(c.etcd.proc.pid)
    publish_many(c.path(1), f"m{tag}", count, threads)
    time.sleep(1.5)  # the revision file is written once a second
    after = sum(write_bytes(p) for p in pids)
    etcd_after = write_bytes(c.etcd.proc.pid)
    data = count * len(PAYLOAD) * min(c.replicas, c.n)
    return max(0, after - before - data) / count / c.n, (etcd_after - etcd_before) / count


def etcd_db_bytes(c: KvfsCluster) -> int:
    r = c.etcd.call("/v3/maintenance/status", {})
    return int(r.get("dbSize", 0))


def cluster_run(n: int, args) -> dict:
    out = {}
    c = KvfsCluster(n=n, replicas=min(2, n), capacity="2G")
    try:
        c.start()
        pids = {k: c.node(k).pid for k in c.nodes}
        pids[0] = c.etcd.proc.pid
        pids[-1] = os.getpid()  # the publishing threads themselves
        cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
        ns0 = c.nodes_json(1)["namespace"]
        out["publish_one"] = publish_many(c.path(1), "p", args.files, args.threads)
        ns = c.nodes_json(1)["namespace"]
        out["changes"] = (ns["changes"] - ns0["changes"]) / args.files
        out["txns"] = (ns["transactions"] - ns0["transactions"]) / args.files
        cpu = {k: (cpu_seconds(p) - cpu0[k]) * 1000 / args.files for k, p in pids.items()}
        out["cpu_client"] = cpu[-1]
        out["cpu_self"] = cpu[1]
        others = [cpu[k] for k in c.nodes if k != 1]
        if others:
            out["cpu_other"] = statistics.mean(others)
        out["cpu_etcd"] = cpu[0]
        out["cpu_sum"] = sum(cpu.values())
        if n > 1:
            rates = {}

            def node(k):
                rates[k] = publish_many(c.path(k), f"a{k}-", args.files // 2, args.threads)
            ts = [threading.Thread(target=node, args=(k,)) for k in c.nodes]
            for t in ts:
                t.start()
            for t in ts:
                t.join()
            out["publish_all"] = sum(rates.values())
        else:
            out["publish_all"] = out["publish_one"]
        out["vis_p50"], out["vis_p99"] = visibility(c, args.samples)
        out["meta_small"], out["etcd_small"] = meta_bytes(c, args.names, args.threads, "s")
        publish_many(c.path(1), "fill", args.names * 9, args.threads)
        out["meta_big"], out["etcd_big"] = meta_bytes(c, args.names, args.threads, "b")
        names = sum(len(files) for _, _, files in os.walk(c.path(1)))
        out["etcd_per_name"] = etcd_db_bytes(c) / max(1, names)
    finally:
        c.cleanup()
    return out


def big_namespace(args) -> dict:
    """A late joiner over --big-names names: catch-up time; then memory per name as the RSS
    growth while as many names again arrive through the watch."""
    c = KvfsCluster(n=2, replicas=1, capacity="4G", start_nodes=[1])
    try:
        c.start()
        publish_many(c.path(1), "big", args.big_names, args.threads)
        t0 = time.monotonic()
        c.start_node(2)
        listed = sum(len(files) for _, _, files in os.walk(c.path(2)))
        catch_up = time.monotonic() - t0
        rss_before = rss_bytes(c.node(2).pid)
        publish_many(c.path(1), "more", args.big_names, args.threads)
        want = listed + args.big_names
        wait_until(lambda: sum(len(f) for _, _, f in os.walk(c.path(2))) >= want, 60.0, 0.2)
        rss_after = rss_bytes(c.node(2).pid)
        return {"names": listed, "late_joiner_s": catch_up,
                "rss_per_name": (rss_after - rss_before) / args.big_names}
    finally:
        c.cleanup()


def seed_bin() -> str:
    return os.environ.get("KVFS_SEED_BIN") or os.path.join(
        os.path.dirname(default_kvfs_bin()), "kvfs-seed-names")


def seed(c: KvfsCluster, count: int, first: int) -> float:
    """Commits files first..first+count-1 of /seed straight into etcd; returns seconds."""
    out = subprocess.run([seed_bin(), "--etcd", c.etcd.endpoint, "--dir", "seed",
                          "--count", str(count), "--first", str(first)],
                         capture_output=True, text=True, timeout=3600)
    if out.returncode != 0:
        raise RuntimeError(f"kvfs-seed-names failed ({out.returncode}): {out.stderr.strip()}")
    return json.loads(out.stdout)["seconds"]


def count_names(path: str) -> int:
    with os.scandir(path) as it:
        return sum(1 for _ in it)


def seeded_namespace(args) -> dict:
    """A late joiner over --seed-names files committed straight into etcd by kvfs-seed-names
    (as a publishing node commits them: 64-character names, each with a chunk layout): start
    to a full listing; then memory per name as the RSS growth while as many again arrive
    through the watch."""
    n = args.seed_names
    # A mount waits for the whole namespace to load: allow a minute per million names.
    kvfs_testlib.MOUNT_TIMEOUT_S = max(kvfs_testlib.MOUNT_TIMEOUT_S, 60.0 * (1 + n / 1e6))
    c = KvfsCluster(n=1, replicas=1, capacity="1G", start_nodes=[])
    try:
        c.start()  # etcd only
        seed_s = seed(c, n, 0)
        t0 = time.monotonic()
        c.start_node(1)
        listed = count_names(c.path(1, "seed"))
        catch_up = time.monotonic() - t0
        if listed != n:
            raise RuntimeError(f"the late joiner lists {listed} of {n} seeded names")
        rss_before = rss_bytes(c.node(1).pid)
        seed_s += seed(c, n, n)
        wait_until(lambda: count_names(c.path(1, "seed")) == 2 * n, max(60.0, n / 1000), 2.0,
                   what=f"{2 * n} names listed")
        rss_after = rss_bytes(c.node(1).pid)
        return {"names": listed, "late_joiner_s": catch_up, "seed_s": seed_s,
                "rss_per_name": (rss_after - rss_before) / n, "rss_total": rss_after}
    finally:
        c.cleanup()


def repair(args) -> dict:
    c = KvfsCluster(n=4, replicas=2, capacity="4G", lease_ttl_s=5)
    try:
        c.start()
        chunk = os.urandom(4 << 20)
        count = max(1, args.repair_mib // 4)
        os.makedirs(c.path(1, "r"), exist_ok=True)
        for i in range(count):
            write_file_atomic(c.path(1 + i % 4, f"r/c{i}"), chunk, tmp_suffix=".tmp")
        for i in range(count):
            wait_until(lambda: os.path.exists(c.path(2, f"r/c{i}")), 10.0)
        victim = 4
        held = sum(1 for i in range(count)
                   if victim in [h["id"] for h in c.location(2, f"r/c{i}")["holders"]])
        t0 = time.monotonic()
        c.kill9(victim)
        wait_until(lambda: c.node_states(2).get(victim) == "down", 60.0, 0.1)

        def repaired():
            for i in range(count):
                states = [h["state"] for h in c.location(2, f"r/c{i}")["holders"]]
                if len(states) < 2 or not set(states) <= {"self", "up"}:
                    return False
            return True
        wait_until(repaired, 300.0, 0.2)
        took = time.monotonic() - t0
        mib = held * 4
        return {"repair_s": took, "repair_mib": mib, "repair_target_s": mib / 100 + 30,
                "lease_s": 5}
    finally:
        c.cleanup()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--files", type=int, default=2000, help="files per publish-rate run")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--one-dir", action="store_true",
                    help="all threads publish into one directory (default: one per thread)")
    ap.add_argument("--samples", type=int, default=200, help="visibility samples")
    ap.add_argument("--names", type=int, default=1000, help="names per meta-bytes run")
    ap.add_argument("--big-names", type=int, default=20000)
    ap.add_argument("--repair-mib", type=int, default=256)
    ap.add_argument("--seed-names", type=int, default=0,
                    help="also: a late joiner and RSS per name over this many names committed "
                         "straight into etcd (1000000 for the issue's 1M-name rows)")
    ap.add_argument("--only-seeded", action="store_true",
                    help="run only the --seed-names measurement")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    global ONE_DIR
    ONE_DIR = args.one_dir
    if args.seed_names < 0:
        ap.error("--seed-names must be >= 0")
    if args.threads < 1:
        ap.error("--threads must be >= 1")
    for name in ("files", "names", "big_names"):
        if getattr(args, name) < args.threads:
            ap.error(f"--{name.replace('_', '-')} must be at least --threads ({args.threads})")
    if args.samples < 1 or args.repair_mib < 4:
        ap.error("--samples must be >= 1 and --repair-mib >= 4 (one 4 MiB chunk)")
    if any(n < 1 for n in args.nodes):
        ap.error("--nodes must be >= 1")

    def progress(what, value):
        print(f"clusterbench: {what}: {json.dumps(value)}", file=sys.stderr, flush=True)
    seeded = None
    if args.seed_names:
        seeded = seeded_namespace(args)
        progress("seeded late joiner", seeded)
    if args.only_seeded:
        if seeded is None:
            ap.error("--only-seeded needs --seed-names")
        print_seeded(seeded, args)
        return 0
    base = single_node(args)
    progress("single node", base)
    runs = {}
    for n in args.nodes:
        runs[n] = cluster_run(n, args)
        progress(f"{n} nodes", runs[n])
    big = big_namespace(args)
    progress("late joiner", big)
    rep = repair(args)
    progress("repair", rep)

    if args.json:
        print(json.dumps({"single": base, "cluster": runs, "big": big, "repair": rep,
                          "seeded": seeded}, indent=2))
        return 0
    one = runs.get(1, {}).get("publish_one")
    print(f"clusterbench: 4 KiB publishes, {args.threads} threads, 2-core machine shared by "
          f"all daemons and etcd")
    print(f"{'':28}{'single, no etcd':>16}" +
          "".join(f"{str(n) + (' nodes' if n > 1 else ' node'):>12}" for n in runs))
    def row(name, key, fmt="{:.0f}"):
        cells = "".join(f"{fmt.format(runs[n][key]) if key in runs[n] else '-':>12}"
                        for n in runs)
        b = fmt.format(base[key]) if key in base else "-"
        print(f"{name:28}{b:>16}{cells}")
    row("publish/s, one node", "publish_one")
    print(f"{'  ratio to single, no etcd':28}{'1.00':>16}" +
          "".join(f"{runs[n]['publish_one'] / base['publish_one']:>12.2f}" for n in runs))
    if one:
        print(f"{'  ratio to 1 node':28}{'-':>16}" +
              "".join(f"{runs[n]['publish_one'] / one:>12.2f}" for n in runs))
    row("  namespace changes/publish", "changes", "{:.2f}")
    row("  etcd transactions/publish", "txns", "{:.2f}")
    row("  CPU ms/publish, publisher", "cpu_self", "{:.2f}")
    row("  CPU ms, each other node", "cpu_other", "{:.2f}")
    row("  CPU ms, etcd", "cpu_etcd", "{:.2f}")
    row("  CPU ms, the bench client", "cpu_client", "{:.2f}")
    row("  CPU ms, all processes", "cpu_sum", "{:.2f}")
    row("publish/s, all nodes", "publish_all")
    row("visible p50 (ms)", "vis_p50", "{:.1f}")
    row("visible p99 (ms)", "vis_p99", "{:.1f}")
    row(f"meta B/publish/node @{args.names}", "meta_small")
    row(f"meta B/publish/node @{args.names * 11}", "meta_big")
    row(f"etcd B written/publish @{args.names}", "etcd_small")
    row(f"etcd B written/publish @{args.names * 11}", "etcd_big")
    row("etcd B/name", "etcd_per_name")
    print(f"\nlate joiner over {big['names']} names: started and listed them in "
          f"{big['late_joiner_s']:.2f} s; {big['rss_per_name']:.0f} B of daemon RSS per name "
          f"(growth while {args.big_names} more arrived)")
    print(f"repair: kill -9 of 1 of 4 nodes holding {rep['repair_mib']} MiB (R=2, lease "
          f"{rep['lease_s']} s): 2 live copies again after {rep['repair_s']:.1f} s "
          f"(target {rep['repair_target_s']:.1f} s)")
    if seeded:
        print_seeded(seeded, args)
    return 0


def print_seeded(seeded: dict, args) -> None:
    print(f"late joiner over {seeded['names']} names committed straight into etcd: started and "
          f"listed them in {seeded['late_joiner_s']:.2f} s (target 30 s at 1M); "
          f"{seeded['rss_per_name']:.0f} B of daemon RSS per name (growth while "
          f"{args.seed_names} more arrived; target 400 B); RSS {seeded['rss_total'] / 2**20:.0f} "
          f"MiB at {2 * args.seed_names} names")


if __name__ == "__main__":
    sys.exit(main())
