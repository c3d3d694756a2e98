"""The kvfs and kvfsctl command lines and the daemon's life cycle: --help, --version, bad
arguments, daemonizing, stopping by fusermount3 -u and by SIGTERM, the status file, kvfsctl on a
mount and on paths that are not kvfs mounts."""

import errno
import json
import mmap
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from kvfs_testlib import (REPO_ROOT, KvfsMount, _is_mounted, _pid_alive, _pids_with_arg,
                          chunk_bytes, default_kvfs_bin, default_kvfsctl_bin, file_matches,
                          mount_count, write_file_atomic, freeze)

MiB = 1024 * 1024


def project_version():
    text = (REPO_ROOT / "CMakeLists.txt").read_text()
    return re.search(r"project\(kvfs\s+VERSION\s+([0-9.]+)", text).group(1)


def _detach_all(path):
    for _ in range(8):
        if mount_count(path) == 0:
            return
        subprocess.run(["fusermount3", "-u", "-z", path], stderr=subprocess.DEVNULL)


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def run(argv, timeout=30):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


class CommandLine(unittest.TestCase):
    def setUp(self):
        self.kvfs = default_kvfs_bin()
        self.kvfsctl = default_kvfsctl_bin()
        self.tmp = tempfile.mkdtemp(prefix="kvfs-cli-")
        self.mnt = os.path.join(self.tmp, "mnt")
        self.data = os.path.join(self.tmp, "data")
        os.mkdir(self.mnt)
        os.mkdir(self.data)
        self.addCleanup(self._cleanup)

    def _cleanup(self):
        # A command that wrongly mounted must not leave the mount behind.
        if _is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-u", self.mnt])
        if not _is_mounted(self.mnt):
            shutil.rmtree(self.tmp, ignore_errors=True)

    def test_help(self):
        r = run([self.kvfs, "--help"])
        self.assertEqual(r.returncode, 0, r.stderr)
        text = r.stdout + r.stderr
        self.assertRegex(text.lower(), r"usage")
        for opt in ("--data", "--capacity", "--device", "--durability", "--compress"):
            self.assertIn(opt, text)
        r = run([self.kvfsctl, "--help"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("status", r.stdout + r.stderr)

    def test_version(self):
        for binary in (self.kvfs, self.kvfsctl):
            r = run([binary, "--version"])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(project_version(), r.stdout + r.stderr)

    def test_bad_arguments_exit_2(self):
        cases = [
            [],                                                      # no mountpoint
            [self.mnt, "--no-such-option"],
            [self.mnt, "--data", self.data, "--capacity", "lots"],
            [self.mnt, "--data", self.data, "--capacity", "12Q"],
            [self.mnt, "--data", self.data, "--durability", "sometimes"],
            [self.mnt, "--data", self.data, "--compress", "zip"],
            [self.mnt, "--data", self.data, "--capacity"],            # missing value
        ]
        for args in cases:
            with self.subTest(args=args):
                r = run([self.kvfs, *args])
                self.assertEqual(r.returncode, 2, f"stdout: {r.stdout}\nstderr: {r.stderr}")
                self.assertTrue(r.stderr.strip(), "no message on stderr")
                self.assertFalse(_is_mounted(self.mnt))

    def test_bad_fuse_options_are_refused_before_anything_is_made(self):
        # libfuse refused them only after the engine had opened: a first start with a
        # misspelt -o option preallocated its whole device file (in the default data
        # directory, /var/lib/kvfs, when --data was not given) and then failed.
        data = os.path.join(self.tmp, "fresh")
        for opt in ("allow_ohter", "data_dir=/x", "max_read=1048576", "max_read=4k",
                    "max_read=100", "subtype=other"):
            with self.subTest(opt=opt):
                r = run([self.kvfs, self.mnt, "--data", data, "--capacity", "64M", "-o", opt])
                self.assertEqual(r.returncode, 2, f"stdout: {r.stdout}\nstderr: {r.stderr}")
                self.assertIn(opt, r.stderr)
                self.assertFalse(os.path.exists(data), "the data directory was made")
                self.assertFalse(_is_mounted(self.mnt))

    def test_options_are_read_with_libfuses_escapes(self):
        # kvfs split -o lists at every comma, libfuse not at an escaped one, and libfuse
        # resolves octal escapes: kvfs refused a fsname holding ",subtype=" that libfuse takes,
        # and let through a max_read libfuse took (which then killed the mount at INIT).
        data = os.path.join(self.tmp, "fresh")
        r = run([self.kvfs, self.mnt, "--data", data, "--capacity", "64M", "-o",
                 "max_read\\0752000000"])
        self.assertEqual(r.returncode, 2, f"stdout: {r.stdout}\nstderr: {r.stderr}")
        self.assertIn("max_read=2000000: max_read must be", r.stderr)
        self.assertFalse(os.path.exists(data), "the data directory was made")
        r = self.daemon("--data", data, "--capacity", "64M", "-o", "fsname=a\\,subtype=b")
        self.assertEqual(r.returncode, 0, f"stdout: {r.stdout}\nstderr: {r.stderr}")
        with open(os.path.join(self.mnt, "f"), "wb") as f:
            f.write(b"x")
        with open(os.path.join(self.mnt, "f"), "rb") as f:
            self.assertEqual(f.read(), b"x")

    def test_a_smaller_max_read_is_taken(self):
        # Any max_read ended the session at INIT ("init() and fuse_session_new() requested
        # different maximum read size"): the mount went away as soon as it came.
        with KvfsMount(capacity="64M", extra_args=["-o", "max_read=65536"]) as m:
            data = os.urandom(3 << 20)
            with open(m.path("f"), "wb") as f:
                f.write(data)
            fd = os.open(m.path("f"), os.O_RDONLY | os.O_DIRECT)
            try:
                # One read of it all: the kernel splits it into READs of max_read at most.
                buf = mmap.mmap(-1, len(data))
                self.assertEqual(os.readv(fd, [buf]), len(data))
                self.assertTrue(bytes(buf) == data, "read other bytes")
            finally:
                os.close(fd)
            self.assertIn("max_read 65536", m.log_tail(1 << 20))

    def daemon(self, *args, cwd=None):
        """Runs kvfs (it daemonizes) on self.mnt; the daemon is stopped by PID at cleanup."""
        r = subprocess.run([self.kvfs, self.mnt, *args], capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL, cwd=cwd)
        if r.returncode == 0:
            self.addCleanup(self.stop_daemon)
        return r

    def stop_daemon(self):
        if not _is_mounted(self.mnt):
            return
        with open(os.path.join(self.mnt, ".kvfs", "status")) as f:
            pid = json.load(f)["pid"]
        subprocess.run(["fusermount3", "-u", self.mnt])
        deadline = time.monotonic() + 20
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertFalse(_pid_alive(pid), "the daemon outlived its unmount")

    def test_data_or_devices_on_the_mount_itself_are_refused(self):
        # The engine opens its files by path while it runs: with its data directory under the
        # mountpoint, each checkpoint was a request to the daemon itself, failed with ENOENT,
        # and the journal grew without bound.
        os.symlink(self.mnt, os.path.join(self.tmp, "link"))
        for args in (["--data", self.mnt], ["--data", os.path.join(self.mnt, "d")],
                     ["--data", os.path.join(self.tmp, "link", "d")],
                     ["--data", self.data, "--device", os.path.join(self.mnt, "x.dev:32M")]):
            with self.subTest(args=args):
                r = self.daemon(*args, "--capacity", "32M")
                self.assertEqual(r.returncode, 2, f"stdout: {r.stdout}\nstderr: {r.stderr}")
                self.assertIn("is on the mount itself", r.stderr)
                self.assertFalse(_is_mounted(self.mnt))

    def test_a_relative_device_path_is_the_callers(self):
        # The daemon runs in / once it detaches: a relative --device was made in /.
        name = f"kvfs-test-{os.getpid()}.dev"
        self.addCleanup(lambda: os.path.exists("/" + name) and os.unlink("/" + name))
        r = self.daemon("--data", self.data, "--device", name + ":32M", cwd=self.tmp)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(os.path.getsize(os.path.join(self.tmp, name)), 32 << 20)
        self.assertFalse(os.path.exists("/" + name))
        with open(os.path.join(self.mnt, ".kvfs", "status")) as f:
            status = json.load(f)
        self.assertEqual(status["devices"], [os.path.join(self.tmp, name)])
        self.assertEqual(status["capacity_bytes"], 31 << 20)
        self.assertIn("capacity 32.0 MiB", r.stdout)  # not a default share of the free space

    def test_a_device_path_that_holds_other_data_is_not_overwritten(self):
        precious = os.path.join(self.tmp, "precious")
        with open(precious, "wb") as f:
            f.write(b"someone's data")
        r = self.daemon("--data", self.data, "--device", precious + ":32M")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("not a kvfs device", r.stderr)
        with open(precious, "rb") as f:
            self.assertEqual(f.read(), b"someone's data")

    def test_a_capacity_the_devices_do_not_have_is_reported(self):
        # A data directory keeps its devices: raising --capacity on a restart changed nothing
        # while kvfs printed the new figure.
        r = self.daemon("--data", self.data, "--capacity", "16M")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn("capacity is", r.stderr)
        self.stop_daemon()
        r = self.daemon("--data", self.data, "--capacity", "64M")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("capacity is 16.0 MiB", r.stderr)
        self.assertIn("does not resize", r.stderr)
        with open(os.path.join(self.mnt, ".kvfs", "status")) as f:
            self.assertEqual(json.load(f)["capacity_bytes"], 16 << 20)

    def test_the_mount_is_ready_when_kvfs_returns(self):
        # kvfs returned before the kernel had its INIT answer: the daemon's own stat of the
        # mount point (which waits for INIT, to set the readahead after it) was still under way,
        # so an unmount right away failed with EBUSY (2 starts in 40 under load), and the first
        # reads had the kernel's default readahead.
        for attempt in range(5):
            with self.subTest(attempt=attempt):
                r = self.daemon("--data", self.data, "--capacity", "16M")
                self.assertEqual(r.returncode, 0, r.stderr)
                # Read before anything touches the mount (an access waits for INIT too).
                (dev,) = [line.split()[2] for line in open("/proc/self/mountinfo")
                          if line.split()[4] == self.mnt]
                with open(f"/sys/class/bdi/{dev}/read_ahead_kb") as f:
                    readahead_kb = int(f.read())
                with open(os.path.join(self.mnt, ".kvfs", "status")) as f:
                    pid = json.load(f)["pid"]
                try:
                    self.assertGreaterEqual(readahead_kb, 1024)  # the kernel's own: 128
                    u = subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True,
                                       text=True)
                    self.assertEqual(u.returncode, 0, u.stderr)
                finally:
                    self.stop_daemon()  # when still mounted
                    deadline = time.monotonic() + 20
                    while _pid_alive(pid) and time.monotonic() < deadline:
                        time.sleep(0.05)
                self.assertFalse(_pid_alive(pid), "the daemon outlived its unmount")

    def test_missing_mountpoint_fails(self):
        r = run([self.kvfs, os.path.join(self.tmp, "does-not-exist"), "--data", self.data,
                 "--capacity", "64M"])
        self.assertNotEqual(r.returncode, 0)
        self.assertTrue(r.stderr.strip(), "no message on stderr")

    def test_kvfsctl_not_a_kvfs_mount(self):
        plain = os.path.join(self.tmp, "plain-file")
        with open(plain, "w") as f:
            f.write("x")
        for args in (["status", self.tmp], ["status", "/"], ["status", self.tmp, "--json"],
                     ["stat", plain], ["stat", plain, "--json"],
                     ["stat", os.path.join(self.tmp, "missing")]):
            with self.subTest(args=args):
                r = run([self.kvfsctl, *args])
                self.assertEqual(r.returncode, 2, f"stdout: {r.stdout}\nstderr: {r.stderr}")
                self.assertTrue(r.stderr.strip(), "no message on stderr")

    def test_kvfsctl_bad_usage(self):
        for args in ([], ["no-such-command"], ["status"]):
            with self.subTest(args=args):
                r = run([self.kvfsctl, *args])
                self.assertNotEqual(r.returncode, 0)
                self.assertTrue((r.stderr + r.stdout).strip())


class Lifecycle(unittest.TestCase):
    def test_fusermount_stops_daemon(self):
        with KvfsMount(capacity="128M") as m:
            pid = m.pid
            write_file_atomic(m.path("a"), chunk_bytes("a", 2 * MiB))
            rc = m.unmount()
            self.assertEqual(rc, 0, m.log_tail())
            self.assertFalse(_pid_alive(pid))
            self.assertFalse(_is_mounted(m.mnt))
            m.start()
            self.assertTrue(file_matches(m.path("a"), "a", 2 * MiB))

    def test_sigterm_stops_cleanly(self):
        with KvfsMount(capacity="128M") as m:
            write_file_atomic(m.path("a"), chunk_bytes("a", 3 * MiB))
            os.makedirs(m.path("x", "y"))
            write_file_atomic(m.path("x", "y", "b"), chunk_bytes("b", 100))
            rc = m.terminate()
            self.assertEqual(rc, 0, f"exit status {rc}\n{m.log_tail()}")
            self.assertFalse(_is_mounted(m.mnt), "SIGTERM left the mount behind")
            m.start()
            self.assertTrue(file_matches(m.path("a"), "a", 3 * MiB))
            self.assertTrue(file_matches(m.path("x", "y", "b"), "b", 100))

    def test_sigterm_before_the_loop_starts_stops(self):
        # A SIGTERM during start-up waits (blocked) until the FUSE loop starts, which then ends
        # before it answers the kernel's INIT. The shutdown joined the readahead thread, which
        # waited in stat() of the mount point for that answer, before it unmounted: 19 of 20
        # daemons hung for good, and every access to the mount point with them.
        tmp = tempfile.mkdtemp(prefix="kvfs-early-")
        self.addCleanup(shutil.rmtree, tmp, True)
        mnt = os.path.join(tmp, "mnt")
        os.mkdir(mnt)
        self.addCleanup(_detach_all, mnt)

        def log(i):
            with open(os.path.join(tmp, f"{i}.log")) as f:
                return f.read()
        for i in range(5):
            log_path = os.path.join(tmp, f"{i}.log")
            with open(log_path, "w") as out:
                p = subprocess.Popen([default_kvfs_bin(), mnt, "--data", os.path.join(tmp, f"d{i}"),
                                      "--capacity", "64M", "-f"],
                                     stdin=subprocess.DEVNULL, stdout=out, stderr=out)
            deadline = time.monotonic() + 10
            # Logged once the stop signals are blocked, before the mount.
            while "engine: opened" not in log(i) and time.monotonic() < deadline:
                time.sleep(0.001)
            p.send_signal(signal.SIGTERM)
            try:
                rc = p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()  # by its pid: ours
                p.wait()
                _detach_all(mnt)
                self.fail(f"round {i}: the daemon hung after SIGTERM:\n{log(i)}")
            self.assertEqual(rc, 0, f"round {i}: {log(i)}")
            self.assertFalse(_is_mounted(mnt), f"round {i}: SIGTERM left the mount behind")

    def test_restart_after_kill9_detaches_the_dead_mount(self):
        # A crashed daemon leaves a mount whose every request fails with ENOTCONN (stat of the
        # root may still answer from the attribute cache); the restart must not stack on it.
        with KvfsMount(capacity="128M") as m:
            self.addCleanup(_detach_all, m.mnt)
            write_file_atomic(m.path("a"), chunk_bytes("a", 3 * MiB))
            m.kill9(detach=False)
            self.assertTrue(_is_mounted(m.mnt))
            with self.assertRaises(OSError) as e:
                os.statvfs(m.mnt)
            self.assertEqual(e.exception.errno, errno.ENOTCONN)
            m.start()
            self.assertEqual(mount_count(m.mnt), 1, "the new mount stacked on the dead one")
            self.assertIn("detached the dead kvfs mount", m.log_tail())
            self.assertTrue(file_matches(m.path("a"), "a", 3 * MiB))
            m.unmount()
            self.assertEqual(mount_count(m.mnt), 0, "a dead mount was left under the new one")

    def test_the_connection_watchdog_goes_with_its_daemon(self):
        # Each daemon runs a watchdog process (fs/connection_watchdog.h) that would abort the
        # connection should the daemon die with a thread stuck in the kernel. It must never
        # outlive its daemon: a clean stop stops it, and after a kill -9 with nothing stuck it
        # closes its copy of /dev/fuse at once, so the dead mount answers ENOTCONN.
        with KvfsMount(capacity="128M") as m:
            self.addCleanup(_detach_all, m.mnt)

            def watchdogs():
                return [p for p in _pids_with_arg(m.mnt)
                        if p != m.pid and "--connection-watchdog" in _cmdline(p)]

            self.assertEqual(len(watchdogs()), 1)
            m.unmount()
            self.assertEqual(watchdogs(), [])
            m.start()
            self.assertEqual(len(watchdogs()), 1)
            write_file_atomic(m.path("a"), chunk_bytes("a", MiB))
            m.kill9(detach=False)
            deadline = time.monotonic() + 5
            while watchdogs() and time.monotonic() < deadline:
                time.sleep(0.02)
            self.assertEqual(watchdogs(), [])
            with self.assertRaises(OSError) as e:
                os.statvfs(m.mnt)
            self.assertEqual(e.exception.errno, errno.ENOTCONN)
            self.assertNotIn("kvfs-watchdog", m.log_tail())  # nothing was stuck: no abort

    def test_the_watchdog_acts_when_the_daemon_died_before_it_could_be_told(self):
        # The kernel tells the watchdog of its daemon's death by a signal it asks for once it
        # runs. A daemon killed in the milliseconds before that (kill -9 at random moments of
        # a start: once in the first few dozen here) left it waiting for ever, while the
        # daemon's readahead thread, stuck on a request to its own dead mount, kept the mount
        # wedged. A stand-in daemon here: its main thread starts the watchdog and exits at
        # once, another thread lives on (as a thread stuck in the kernel would), and its
        # "/dev/fuse" is /dev/null (connection 999999 names no mount: nothing is aborted).
        tmp = tempfile.mkdtemp(prefix="kvfs-watchdog-")
        self.addCleanup(shutil.rmtree, tmp, True)
        log = os.path.join(tmp, "log")
        open(log, "w").close()
        stand_in = (
            "import ctypes, os, subprocess, sys, threading, time\n"
            "fd = os.open('/dev/null', os.O_RDONLY)\n"
            "threading.Thread(target=time.sleep, args=(30,)).start()\n"
            "w = subprocess.Popen([sys.argv[1], '--connection-watchdog', str(os.getpid()),"
            " '999999', str(fd), sys.argv[2], '/nowhere'], pass_fds=[fd])\n"
            "print(w.pid, flush=True)\n"
            "ctypes.CDLL(None).pthread_exit(None)\n")
        daemon = subprocess.Popen([sys.executable, "-c", stand_in, default_kvfs_bin(), log],
                                  stdout=subprocess.PIPE, text=True)
        self.addCleanup(lambda: (daemon.kill(), daemon.wait()))
        watchdog = int(daemon.stdout.readline())
        deadline = time.monotonic() + 15
        while _pid_alive(watchdog) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _pid_alive(watchdog):
            os.kill(watchdog, signal.SIGKILL)
            self.fail("the watchdog still waits for a daemon whose main thread is gone")
        with open(log) as f:
            self.assertIn("died with a thread stuck in the kernel", f.read())

    def test_a_live_or_frozen_mount_is_not_mounted_over(self):
        with KvfsMount(capacity="128M") as m:
            self.addCleanup(_detach_all, m.mnt)
            write_file_atomic(m.path("a"), chunk_bytes("a", MiB))
            other_data = os.path.join(m.root, "data2")
            second = [m.kvfs_bin, m.mnt, "--data", other_data, "--capacity", "64M", "-f"]
            r = run(second, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("already has a live kvfs mount", r.stderr)
            freeze(m.pid)
            try:
                r = run(second, timeout=30)  # the probe gives up on a frozen daemon (2 s)
            finally:
                os.kill(m.pid, signal.SIGCONT)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("does not answer", r.stderr)
            self.assertEqual(mount_count(m.mnt), 1)
            self.assertTrue(file_matches(m.path("a"), "a", MiB))

    def test_daemonizes_until_unmounted(self):
        with KvfsMount(capacity="128M", foreground=False) as m:
            self.assertIsNotNone(m.pid, "could not find the daemon's PID")
            self.assertTrue(_pid_alive(m.pid))
            write_file_atomic(m.path("a"), chunk_bytes("a", MiB))
            self.assertTrue(file_matches(m.path("a"), "a", MiB))
            pid = m.pid
            m.unmount()
            self.assertFalse(_pid_alive(pid), "daemon still running after fusermount3 -u")
            self.assertFalse(_is_mounted(m.mnt))

    def test_second_mount_on_same_data_refused(self):
        with KvfsMount(capacity="128M") as m:
            other = os.path.join(m.root, "mnt2")
            os.mkdir(other)
            p = subprocess.Popen([m.kvfs_bin, other, "--data", m.data, "--capacity", "128M",
                                  "-f"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
            try:
                deadline = time.monotonic() + 15
                while p.poll() is None and not _is_mounted(other) \
                        and time.monotonic() < deadline:
                    time.sleep(0.05)
                self.assertFalse(_is_mounted(other), "a second daemon mounted the same data dir")
                self.assertIsNotNone(p.poll(), "a second daemon on the same data dir hangs")
                self.assertNotEqual(p.returncode, 0)
                self.assertTrue(p.stderr.read().strip(), "no message on stderr")
            finally:
                if p.poll() is None:
                    p.kill()
                p.wait()
                p.stdout.close()
                p.stderr.close()
                if _is_mounted(other):
                    subprocess.run(["fusermount3", "-u", "-z", other])
            # the first daemon is unharmed
            write_file_atomic(m.path("a"), chunk_bytes("a", MiB))
            self.assertTrue(file_matches(m.path("a"), "a", MiB))

    def test_status_file_and_kvfsctl(self):
        with KvfsMount(capacity="256M") as m:
            status = m.status()
            self.assertIsInstance(status, dict)
            self.assertNotIn(".kvfs", os.listdir(m.mnt))
            os.makedirs(m.path("llama3-8b"))
            write_file_atomic(m.path("llama3-8b", "c0"), chunk_bytes("c0", 4 * MiB))
            r = m.kvfsctl("status", m.mnt)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertTrue(r.stdout.strip())
            r = m.kvfsctl("status", m.mnt, "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIsInstance(json.loads(r.stdout), dict)
            # kvfsctl status accepts any path inside the mount too
            r = m.kvfsctl("status", m.path("llama3-8b"))
            self.assertEqual(r.returncode, 0, r.stderr)
            r = m.kvfsctl("stat", m.path("llama3-8b", "c0"))
            self.assertEqual(r.returncode, 0, r.stderr)
            r = m.kvfsctl("stat", m.path("llama3-8b", "c0"), "--json")
            self.assertEqual(r.returncode, 0, r.stderr)
            info = json.loads(r.stdout)
            self.assertIn(4 * MiB, _numbers(info), f"size missing from {info}")
            r = m.kvfsctl("stat", m.path("llama3-8b", "missing"))
            self.assertNotEqual(r.returncode, 0)


def _numbers(obj):
    """Every integer anywhere in a parsed JSON value."""
    if isinstance(obj, bool):
        return []
    if isinstance(obj, int):
        return [obj]
    if isinstance(obj, dict):
        return [n for v in obj.values() for n in _numbers(v)]
    if isinstance(obj, list):
        return [n for v in obj for n in _numbers(v)]
    return []


if __name__ == "__main__":
    unittest.main()
