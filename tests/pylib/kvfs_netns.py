"""A host of its own for one cluster node: a network namespace joined to this one by two veth
pairs, one for peer traffic and one for etcd, so that the peer link can be cut while etcd stays
reachable (a partition: the node keeps its lease and stays "up" for everyone).

Python 3 standard library plus iproute2 and util-linux's nsenter; needs root. Names and
addresses are unique per instance (pid + counter): tests running at once do not meet.

    ns = NetnsHost(root_dir)          # creates the namespace and the links
    ns.peer_root, ns.peer_ns          # peer link: this side, the namespace's side
    ns.etcd_root                      # where etcd serves the namespace's node
    ns.wrapper()                      # a program that runs kvfs inside the namespace
    ns.partition(); ns.heal()         # black-hole the peer link, and back
    ns.cut_etcd(); ns.mend_etcd()     # the same for the etcd link
    ns.cleanup()                      # links and namespace gone

The node's mount stays in this mount namespace (nsenter --net changes only the network), so
tests use it as any other. partition() takes the namespace's end of the peer link down and pins
its neighbour entry here: packets to it are dropped without an error, established connections
hang and new ones time out, as with a cable cut somewhere in between.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess

_counter = itertools.count()


def netns_available() -> str | None:
    """None when namespaces with veth links can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nsenter"):
        if not shutil.which(tool):
            return f"{tool} not found"
    return None


def _run(*args: str) -> str:
    r = subprocess.run(list(args), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


class NetnsHost:
    def __init__(self, root: str):
        n = next(_counter)
        tag = f"{os.getpid() % 100000}{n}"
        self.name = f"kvfs-t{tag}"
        # Interface names are at most 15 bytes.
        self._peer_if, self._peer_if_ns = f"kvp{tag}a", f"kvp{tag}b"
        self._etcd_if, self._etcd_if_ns = f"kve{tag}a", f"kve{tag}b"
        # Two /30 links in 198.18.0.0/15, the range set aside for network tests (RFC 2544):
        # no real network uses it; one already routed here is passed over.
        routes = subprocess.run(["ip", "-o", "-4", "route", "show", "table", "all"],
                                capture_output=True, text=True).stdout
        seq = (os.getpid() * 7 + n * 131) % (512 * 32)
        for _ in range(512 * 32):
            a, rest = 18 + seq // (256 * 32), seq % (256 * 32)
            b, c = rest // 32, (rest % 32) * 8
            if f"198.{a}.{b}.{c}/" not in routes and f"198.{a}.{b}.{c + 4}/" not in routes:
                break
            seq = (seq + 1) % (512 * 32)
        self.peer_root, self.peer_ns = f"198.{a}.{b}.{c + 1}", f"198.{a}.{b}.{c + 2}"
        self.etcd_root, self.etcd_ns = f"198.{a}.{b}.{c + 5}", f"198.{a}.{b}.{c + 6}"
        self._root = root
        self._wrapper = None
        self._made = False
        try:
            self._setup()
        except BaseException:
            self.cleanup()
            raise

    def _setup(self) -> None:
        _run("ip", "netns", "add", self.name)
        self._made = True
        ns = ("ip", "-n", self.name)
        _run(*ns, "link", "set", "lo", "up")
        for here, there, addr_here, addr_there in (
                (self._peer_if, self._peer_if_ns, self.peer_root, self.peer_ns),
                (self._etcd_if, self._etcd_if_ns, self.etcd_root, self.etcd_ns)):
            _run("ip", "link", "add", here, "type", "veth", "peer", "name", there)
            _run("ip", "link", "set", there, "netns", self.name)
            _run("ip", "addr", "add", f"{addr_here}/30", "dev", here)
            _run("ip", "link", "set", here, "up")
            _run(*ns, "addr", "add", f"{addr_there}/30", "dev", there)
            _run(*ns, "link", "set", there, "up")

    def wrapper(self) -> str:
        """A program that runs kvfs (the next argument's binary) in this namespace, as the
        same process (exec all the way: its PID is the daemon's)."""
        from kvfs_testlib import default_kvfs_bin
        path = os.path.join(self._root, f"kvfs-in-{self.name}")
        with open(path, "w") as f:
            f.write(f"#!/bin/sh\nexec nsenter --net=/run/netns/{self.name} -- "
                    f"'{default_kvfs_bin()}' \"$@\"\n")
        os.chmod(path, 0o755)
        self._wrapper = path
        return path

    def _cut(self, here: str, there: str, addr_there: str) -> None:
        mac = _run("ip", "-n", self.name, "-o", "link", "show", there).split(
            "link/ether ")[1].split()[0]
        _run("ip", "neigh", "replace", addr_there, "lladdr", mac, "nud", "permanent", "dev", here)
        _run("ip", "-n", self.name, "link", "set", there, "down")

    def _mend(self, here: str, there: str, addr_there: str) -> None:
        _run("ip", "-n", self.name, "link", "set", there, "up")
        subprocess.run(["ip", "neigh", "del", addr_there, "dev", here], capture_output=True)

    def partition(self) -> None:
        """Cut the peer link (etcd stays reachable)."""
        self._cut(self._peer_if, self._peer_if_ns, self.peer_ns)

    def heal(self) -> None:
        self._mend(self._peer_if, self._peer_if_ns, self.peer_ns)

    def cut_etcd(self) -> None:
        """Cut the etcd link (the peers stay reachable)."""
        self._cut(self._etcd_if, self._etcd_if_ns, self.etcd_ns)

    def mend_etcd(self) -> None:
        self._mend(self._etcd_if, self._etcd_if_ns, self.etcd_ns)

    def cleanup(self) -> None:
        if self._wrapper:
            try:
                os.unlink(self._wrapper)
            except FileNotFoundError:
                pass
            self._wrapper = None
        for link in (self._peer_if, self._etcd_if):
            subprocess.run(["ip", "link", "del", link], capture_output=True)
        if self._made:
            subprocess.run(["ip", "netns", "del", self.name], capture_output=True)
            self._made = False
