"""The Prometheus endpoint (kvfs --metrics ADDR:PORT), scraped with urllib during a mount:
the text format 0.0.4 with HELP/TYPE lines, counters that move with reads and writes, 404 for
anything but GET /metrics, exit status 2 and no mount when the address cannot be bound, and
the port closed once the daemon has unmounted."""

import mmap
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from kvfs_testlib import KvfsMount, _is_mounted, chunk_bytes, default_kvfs_bin, write_file_atomic

MiB = 1024 * 1024
SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def scrape(address, path="/metrics"):
    with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as r:
        return r.status, r.headers.get("Content-Type", ""), r.read().decode()


def parse(text):
    """{name: value} of the samples, and {name: type}; checks every line's syntax."""
    samples, types, helps = {}, {}, set()
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helps.add(line.split()[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            types[name] = kind
        else:
            m = SAMPLE.match(line)
            assert m, f"not a sample line: {line!r}"
            samples[m.group(1)] = float(m.group(3))
    for name in samples:
        assert name in types and name in helps, f"{name} has no HELP/TYPE"
    return samples, types


def read_direct(path, size):
    """Reads the whole file with O_DIRECT, so the daemon serves it (no page cache)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        buf = mmap.mmap(-1, (size + 4095) // 4096 * 4096)
        n = os.readv(fd, [buf])
        return bytes(buf[:n])
    finally:
        os.close(fd)


class MetricsEndpoint(unittest.TestCase):
    def test_scrape_counters_move_with_reads_and_writes(self):
        with KvfsMount(capacity="256M", extra_args=["--metrics", "127.0.0.1:0"]) as m:
            address = m.status()["metrics_address"]
            self.assertRegex(address, r"^127\.0\.0\.1:\d+$")
            code, ctype, text = scrape(address)
            self.assertEqual(code, 200)
            self.assertIn("text/plain", ctype)
            self.assertIn("version=0.0.4", ctype)
            before, types = parse(text)
            for name in ("kvfs_reads_total", "kvfs_writes_total", "kvfs_read_bytes_total",
                         "kvfs_written_bytes_total", "kvfs_lookups_total",
                         "kvfs_lookup_hits_total", "kvfs_lookup_misses_total",
                         "kvfs_evictions_total", "kvfs_checksum_failures_total"):
                self.assertEqual(types.get(name), "counter", name)
            for name in ("kvfs_capacity_bytes", "kvfs_used_bytes", "kvfs_files"):
                self.assertEqual(types.get(name), "gauge", name)
            for name, kind in types.items():
                self.assertEqual(kind == "counter", name.endswith("_total"), name)
            self.assertEqual(before["kvfs_capacity_bytes"], 256 * MiB)
            self.assertIn('kvfs_info{version="', text)

            path = m.path("chunk")
            data = chunk_bytes("chunk", 2 * MiB)
            write_file_atomic(path, data)
            self.assertFalse(os.path.exists(m.path("no-such-chunk")))
            after_write, _ = parse(scrape(address)[2])
            self.assertGreaterEqual(after_write["kvfs_written_bytes_total"]
                                    - before["kvfs_written_bytes_total"], 2 * MiB)
            self.assertGreater(after_write["kvfs_writes_total"], before["kvfs_writes_total"])
            self.assertGreater(after_write["kvfs_lookup_misses_total"],
                               before["kvfs_lookup_misses_total"])
            self.assertEqual(after_write["kvfs_files"], 1)

            self.assertEqual(read_direct(path, len(data)), data)
            after_read, _ = parse(scrape(address)[2])
            self.assertGreaterEqual(after_read["kvfs_read_bytes_total"]
                                    - after_write["kvfs_read_bytes_total"], 2 * MiB)
            self.assertGreater(after_read["kvfs_reads_total"], after_write["kvfs_reads_total"])

    def test_only_get_metrics(self):
        with KvfsMount(capacity="64M", extra_args=["--metrics", "127.0.0.1:0"]) as m:
            address = m.status()["metrics_address"]
            for path in ("/", "/metric", "/metrics/x", "/favicon.ico"):
                with self.subTest(path=path):
                    with self.assertRaises(urllib.error.HTTPError) as cm:
                        scrape(address, path)
                    self.assertEqual(cm.exception.code, 404)
            req = urllib.request.Request(f"http://{address}/metrics", data=b"x", method="POST")
            with self.assertRaises(urllib.error.HTTPError) as cm:
                urllib.request.urlopen(req, timeout=10)
            self.assertEqual(cm.exception.code, 404)
            # A client that connects and says nothing does not block the next scrape.
            host, port = address.rsplit(":", 1)
            idle = socket.create_connection((host, int(port)), timeout=10)
            try:
                self.assertEqual(scrape(address)[0], 200)
            finally:
                idle.close()
            self.assertEqual(scrape(address, "/metrics?x=1")[0], 200)

    def test_idle_and_slow_clients_do_not_keep_a_scraper_out(self):
        # Served one at a time, 40 connections that say nothing made a scrape wait 40 x 3 s,
        # and a client sending a byte now and then held the endpoint for good.
        with KvfsMount(capacity="64M", extra_args=["--metrics", "127.0.0.1:0"]) as m:
            address = m.status()["metrics_address"]
            host, port = address.rsplit(":", 1)
            idle = [socket.create_connection((host, int(port)), timeout=10) for _ in range(40)]
            drip = socket.create_connection((host, int(port)), timeout=10)
            try:
                drip.sendall(b"G")
                self.assertEqual(scrape(address)[0], 200)  # its own 10 s timeout
                closed = False
                for byte in b"ET /metrics HTTP/1.1\r\n":  # one a second, for up to 20 s
                    time.sleep(1)
                    try:
                        drip.sendall(bytes([byte]))
                    except OSError:
                        closed = True
                        break
                    drip.settimeout(0.01)
                    try:
                        closed = drip.recv(100) == b""
                    except socket.timeout:
                        pass
                    except OSError:
                        closed = True
                    if closed:
                        break
                self.assertTrue(closed, "the endpoint still waits for the dripping client")
                self.assertEqual(scrape(address)[0], 200)
            finally:
                for s in idle + [drip]:
                    s.close()

    def test_stops_at_unmount(self):
        m = KvfsMount(capacity="64M", extra_args=["--metrics", "127.0.0.1:0"])
        with m:
            address = m.status()["metrics_address"]
            self.assertEqual(scrape(address)[0], 200)
            self.assertEqual(m.unmount(), 0)  # the daemon's exit status
        host, port = address.rsplit(":", 1)
        with self.assertRaises(ConnectionRefusedError):
            socket.create_connection((host, int(port)), timeout=5).close()


class MetricsStartErrors(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="kvfs-metrics-")
        self.mnt = os.path.join(self.tmp, "mnt")
        self.data = os.path.join(self.tmp, "data")
        os.mkdir(self.mnt)
        os.mkdir(self.data)
        self.addCleanup(self._cleanup)

    def _cleanup(self):
        if _is_mounted(self.mnt):  # only if a failing start wrongly mounted
            subprocess.run(["fusermount3", "-u", self.mnt])
        if not _is_mounted(self.mnt):
            shutil.rmtree(self.tmp, ignore_errors=True)

    def test_bind_errors_exit_2_without_mounting(self):
        busy = socket.socket()
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        self.addCleanup(busy.close)
        port = busy.getsockname()[1]
        for value in (f"127.0.0.1:{port}", "127.0.0.1", "127.0.0.1:99999", ":9108"):
            for fg in ([], ["-f"]):
                with self.subTest(metrics=value, fg=fg):
                    r = subprocess.run([default_kvfs_bin(), self.mnt, "--data", self.data,
                                        "--capacity", "64M", "--metrics", value, *fg],
                                       capture_output=True, text=True, timeout=60,
                                       stdin=subprocess.DEVNULL)
                    self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
                    self.assertIn("--metrics", r.stderr)
                    self.assertFalse(_is_mounted(self.mnt))


if __name__ == "__main__":
    unittest.main()
