"""Mounting kvfs like any filesystem: `mount -t fuse.kvfs` and `-t kvfs` through mount.kvfs,
an /etc/fstab line (a temporary fstab, `mount -T FILE`), how -o options become kvfs's command
line, clear errors with mount(8)'s exit codes, and the systemd units in scripts/systemd/.

mount(8) runs helpers only from /sbin, so the tests that go through mount(8) link
/sbin/mount.fuse.kvfs and /sbin/mount.kvfs to this build's helper for the duration of the test
(under a lock, so parallel cases take turns) and remove the links afterwards; they skip when
another mount.kvfs is installed there. mount(8) runs the helper with an empty PATH: the helper
finds kvfs beside itself, as an installed one finds the installed kvfs."""

import fcntl
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from kvfs_testlib import (REPO_ROOT, _is_mounted, _pid_alive, _pids_with_arg, chunk_bytes,
                          default_kvfs_bin, file_matches, mount_count, write_file_atomic)

MiB = 1024 * 1024
HELPER = os.path.join(os.path.dirname(os.path.abspath(default_kvfs_bin())), "mount.kvfs")
SBIN_LINKS = ["/sbin/mount.fuse.kvfs", "/sbin/mount.kvfs"]
LOCK_PATH = os.path.join(tempfile.gettempdir(), "kvfs-test-sbin-mount-helper.lock")
UNITS = REPO_ROOT / "scripts" / "systemd"


def run(argv, timeout=60, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, **kw)


def mount_env():
    """mount(8)'s environment without KVFS_BIN: the helper must find kvfs by itself."""
    env = dict(os.environ)
    env.pop("KVFS_BIN", None)
    return env


def mountinfo(path):
    """(mount options, fstype, source, super options) of the mount at path, or None."""
    real = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            fields = left.split()
            if fields[4].replace("\\040", " ") == real:
                fstype, source, sopts = right.split()[:3]
                return fields[5].split(","), fstype, source, sopts.split(",")
    return None


def read_status(mnt):
    import json
    with open(os.path.join(mnt, ".kvfs", "status")) as f:
        return json.load(f)


class HelperMount:
    """A temp mountpoint and data dir for mounts made by mount(8) or mount.kvfs; cleanup
    unmounts, waits for the daemon by its PID (from .kvfs/status), removes the temp dir."""

    def __init__(self, test):
        self.root = tempfile.mkdtemp(prefix="kvfs-mh-", dir=os.environ.get("KVFS_TEST_TMPDIR"))
        self.mnt = os.path.join(self.root, "mnt")
        self.data = os.path.join(self.root, "data")
        os.mkdir(self.mnt)
        self.pids = set()
        test.addCleanup(self.cleanup)

    def note_daemon(self):
        pid = int(read_status(self.mnt)["pid"])
        self.pids.add(pid)
        return pid

    def wait_gone(self, pid, timeout=20):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not _pid_alive(pid):
                return True
            time.sleep(0.05)
        return False

    def cleanup(self):
        for _ in range(3):
            if not _is_mounted(self.mnt):
                break
            subprocess.run(["umount", self.mnt], capture_output=True)
            time.sleep(0.2)
        # daemons whose PID the test never read (a failed start): found by our unique mountpoint
        self.pids.update(p for p in _pids_with_arg(self.mnt) if _pid_alive(p))
        for pid in self.pids:
            if not self.wait_gone(pid, 10):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.wait_gone(pid, 5)
        if _is_mounted(self.mnt):
            subprocess.run(["fusermount3", "-u", "-z", self.mnt], capture_output=True)
        if not _is_mounted(self.mnt):
            shutil.rmtree(self.root, ignore_errors=True)


def require_helper(test):
    if not os.access(HELPER, os.X_OK):
        test.skipTest(f"{HELPER} is not built (cmake --build ... --target mount.kvfs)")


def require_mount_rights(test):
    if os.geteuid() != 0:
        test.skipTest("mounting through mount(8) needs root")
    if not os.path.exists("/dev/fuse"):
        test.skipTest("no /dev/fuse")


class SbinHelper:
    """Links /sbin/mount.fuse.kvfs and /sbin/mount.kvfs to this build's helper while held."""

    def __init__(self, test):
        self.test = test
        self.created = []
        self.lock = None

    def __enter__(self):
        self.lock = open(LOCK_PATH, "a")
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        try:
            for link in SBIN_LINKS:
                if os.path.islink(link) and os.path.realpath(link) == os.path.realpath(HELPER):
                    self.created.append(link)  # left by an interrupted run of this test
                elif os.path.lexists(link):
                    raise unittest.SkipTest(f"{link} exists and is not this build's helper: "
                                            "mount(8) would run it instead")
                else:
                    os.symlink(HELPER, link)
                    self.created.append(link)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc):
        for link in self.created:
            if os.path.islink(link) and os.path.realpath(link) == os.path.realpath(HELPER):
                os.unlink(link)
        self.created = []
        if self.lock is not None:
            fcntl.flock(self.lock, fcntl.LOCK_UN)
            self.lock.close()
            self.lock = None


def fake_command(*args):
    """What mount.kvfs -f -v would run: the kvfs argv after the binary."""
    r = run([HELPER, *args, "-f", "-v"])
    if r.returncode != 0:
        raise AssertionError(f"mount.kvfs -f -v failed ({r.returncode}): {r.stderr}")
    line = [l for l in r.stdout.splitlines() if l.startswith("mount.kvfs: ")][-1]
    return shlex.split(line[len("mount.kvfs: "):]), r


class Translation(unittest.TestCase):
    """mount.kvfs -f -v (fake, verbose) prints the kvfs command line and mounts nothing."""

    def setUp(self):
        require_helper(self)
        self.m = HelperMount(self)

    def test_options_become_kvfs_flags_and_fuse_options(self):
        argv, _ = fake_command(
            "kvfs", self.m.mnt, "-o",
            "rw,defaults,data_dir=/var/lib/kvfs,capacity=64G,_netdev,nofail,noauto,"
            "allow_other,default_permissions,durability=async,compress=lz4,eviction=lfu,"
            "x-systemd.automount,device=/nvme0/kvfs.dev:1T,device=/nvme1/kvfs.dev,"
            "high_watermark=0.85,noatime,user=alice,comment=x,max_read=65536",
            "-n", "-s")
        self.assertTrue(os.path.samefile(argv[0], os.path.join(os.path.dirname(HELPER),
                                                                  "kvfs")), argv[0])
        self.assertEqual(argv[1], self.m.mnt)
        fuse = argv[argv.index("-o") + 1].split(",")
        flags = [a for a in argv[2:] if a.startswith("--")]
        self.assertEqual(flags, ["--data=/var/lib/kvfs", "--capacity=64G", "--durability=async",
                                 "--compress=lz4", "--eviction=lfu",
                                 "--device=/nvme0/kvfs.dev:1T", "--device=/nvme1/kvfs.dev",
                                 "--high-watermark=0.85"])
        self.assertEqual(fuse, ["rw", "allow_other", "default_permissions", "noatime",
                                "max_read=65536", "fsname=kvfs"])
        self.assertEqual(argv.count("-o"), 1)
        self.assertFalse(_is_mounted(self.m.mnt))

    def test_source_is_the_fsname_unless_given(self):
        argv, _ = fake_command("cache,a", self.m.mnt)
        self.assertEqual(argv[2:], ["-o", "fsname=cache\\,a"])
        argv, _ = fake_command("kvfs", self.m.mnt, "-o", "fsname=mine")
        self.assertEqual(argv[2:], ["-o", "fsname=mine"])

    def test_later_kvfs_options_pass_through(self):
        # Keys the helper does not know are kvfs long options, so new daemon flags need no
        # change in the helper; kvfs itself refuses the misspelt ones (tested below).
        argv, _ = fake_command("kvfs", self.m.mnt, "-o",
                               "config=/etc/kvfs/kvfs.toml,node_id=n1,log_level=debug")
        self.assertEqual(argv[2:5], ["--config=/etc/kvfs/kvfs.toml", "--node-id=n1",
                                     "--log-level=debug"])

    def test_refused_options(self):
        for opt in ("foreground", "f", "subtype=other", "setuid=alice", "drop_privileges",
                    "nodiratime", "=x"):
            with self.subTest(opt=opt):
                r = run([HELPER, "kvfs", self.m.mnt, "-o", "data_dir=/tmp/x," + opt])
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertIn("mount.kvfs:", r.stderr)
                self.assertIn(opt.split("=")[0] or "no name", r.stderr)
                self.assertFalse(_is_mounted(self.m.mnt))

    def test_usage_errors(self):
        cases = [
            ([], 1), (["kvfs"], 1), (["kvfs", self.m.mnt, "extra"], 1),
            (["kvfs", self.m.mnt, "-t", "ext4"], 1), (["kvfs", self.m.mnt, "-x"], 1),
            (["kvfs", self.m.mnt, "-o"], 1),
            (["kvfs", os.path.join(self.m.root, "missing")], 32),
        ]
        for args, code in cases:
            with self.subTest(args=args):
                r = run([HELPER, *args])
                self.assertEqual(r.returncode, code, f"stdout: {r.stdout}\nstderr: {r.stderr}")
                self.assertRegex(r.stderr, r"^mount\.kvfs: ")

    def test_help_and_version(self):
        r = run([HELPER, "--help"])
        self.assertEqual(r.returncode, 0, r.stderr)
        for word in ("data_dir", "capacity", "allow_other", "_netdev", "KVFS_BIN"):
            self.assertIn(word, r.stdout)
        version = re.search(r"project\(kvfs\s+VERSION\s+([0-9.]+)",
                            (REPO_ROOT / "CMakeLists.txt").read_text()).group(1)
        r = run([HELPER, "--version"])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(version, r.stdout)

    def test_kvfs_binary_from_env_or_missing(self):
        r = run([HELPER, "kvfs", self.m.mnt, "-f", "-v"],
                env=dict(os.environ, KVFS_BIN="/nonexistent/kvfs"))
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("cannot find the kvfs binary", r.stderr)
        self.assertIn("/nonexistent/kvfs", r.stderr)


class MountCommand(unittest.TestCase):
    """The real thing: mount(8) runs the helper, kvfs mounts, umount(8) stops it."""

    def setUp(self):
        require_helper(self)
        require_mount_rights(self)
        if not os.access(default_kvfs_bin(), os.X_OK):
            self.skipTest("kvfs is not built")
        self.m = HelperMount(self)
        self.sbin = SbinHelper(self)
        self.sbin.__enter__()
        self.addCleanup(self.sbin.__exit__)  # runs after the mount's cleanup

    def mount(self, *args):
        # cwd=/ so that mount(8) does not take the source for a file of the cwd
        return run(["mount", *args], env=mount_env(), cwd="/")

    def umount_and_wait(self, pid):
        r = run(["umount", self.m.mnt])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(self.m.wait_gone(pid), "the daemon did not exit after umount")
        self.assertFalse(_is_mounted(self.m.mnt))

    def test_mount_t_fuse_kvfs_and_t_kvfs(self):
        opts = (f"data_dir={self.m.data},capacity=64M,durability=async,allow_other,noatime,"
                "_netdev")
        r = self.mount("-t", "fuse.kvfs", "kvfs-test", self.m.mnt, "-o", opts)
        self.assertEqual(r.returncode, 0, f"stdout: {r.stdout}\nstderr: {r.stderr}")
        self.assertEqual(r.stdout, "", "mount is quiet when it works")
        pid = self.m.note_daemon()
        mopts, fstype, source, sopts = mountinfo(self.m.mnt)
        self.assertEqual((fstype, source), ("fuse.kvfs", "kvfs-test"))
        self.assertIn("noatime", mopts)
        self.assertIn("allow_other", sopts)
        status = read_status(self.m.mnt)
        self.assertEqual(status["capacity_bytes"], 64 * MiB)
        self.assertEqual(status["durability"], "async")
        self.assertEqual(os.path.realpath(status["data_dir"]), os.path.realpath(self.m.data))
        os.makedirs(os.path.join(self.m.mnt, "llama3-8b"))
        path = os.path.join(self.m.mnt, "llama3-8b", "c0")
        write_file_atomic(path, chunk_bytes("c0", 3 * MiB))
        self.umount_and_wait(pid)

        # -t kvfs runs /sbin/mount.kvfs; the same data dir brings the file back; -v shows the
        # kvfs command line
        r = self.mount("-v", "-t", "kvfs", "kvfs-test", self.m.mnt, "-o",
                       f"data_dir={self.m.data},capacity=64M")
        self.assertEqual(r.returncode, 0, f"stdout: {r.stdout}\nstderr: {r.stderr}")
        self.assertIn(f" {self.m.mnt} --data={self.m.data} --capacity=64M -o ", r.stdout)
        pid = self.m.note_daemon()
        self.assertEqual(mountinfo(self.m.mnt)[1], "fuse.kvfs")
        self.assertTrue(file_matches(path, "c0", 3 * MiB))
        self.umount_and_wait(pid)

    def test_mount_again_after_the_daemon_was_killed(self):
        # The dead mount (ENOTCONN) passes the helper's mountpoint check; kvfs detaches it.
        opts = f"data_dir={self.m.data},capacity=64M"
        r = self.mount("-t", "kvfs", "kvfs-test", self.m.mnt, "-o", opts)
        self.assertEqual(r.returncode, 0, r.stderr)
        pid = self.m.note_daemon()
        write_file_atomic(os.path.join(self.m.mnt, "a"), chunk_bytes("a", MiB))
        os.kill(pid, signal.SIGKILL)
        self.assertTrue(self.m.wait_gone(pid))
        r = self.mount("-t", "kvfs", "kvfs-test", self.m.mnt, "-o", opts)
        self.assertEqual(r.returncode, 0, f"stdout: {r.stdout}\nstderr: {r.stderr}")
        pid = self.m.note_daemon()
        self.assertEqual(mount_count(self.m.mnt), 1, "mounted on top of the dead mount")
        self.assertTrue(file_matches(os.path.join(self.m.mnt, "a"), "a", MiB))
        self.umount_and_wait(pid)
        self.assertEqual(mount_count(self.m.mnt), 0)

    def test_fstab_line(self):
        fstab = os.path.join(self.m.root, "fstab")
        with open(fstab, "w") as f:
            f.write("# a temporary fstab: never the real /etc/fstab\n"
                    f"kvfs {self.m.mnt} fuse.kvfs defaults,data_dir={self.m.data},capacity=96M,"
                    "compress=lz4,_netdev,nofail,x-systemd.requires=network-online.target 0 0\n")
        r = self.mount("-T", fstab, self.m.mnt)
        self.assertEqual(r.returncode, 0, f"stdout: {r.stdout}\nstderr: {r.stderr}")
        pid = self.m.note_daemon()
        status = read_status(self.m.mnt)
        self.assertEqual(status["capacity_bytes"], 96 * MiB)
        self.assertEqual(status["compression"], "lz4")
        self.assertEqual(mountinfo(self.m.mnt)[1:3], ("fuse.kvfs", "kvfs"))
        write_file_atomic(os.path.join(self.m.mnt, "a"), chunk_bytes("a", MiB))

        # mount -a recognises the line as mounted (fsname = the fstab source) and leaves it
        r = self.mount("-T", fstab, "-a")
        self.assertEqual(r.returncode, 0, f"stdout: {r.stdout}\nstderr: {r.stderr}")
        self.assertEqual(mount_count(self.m.mnt), 1)
        self.assertTrue(_pid_alive(pid))
        self.assertTrue(file_matches(os.path.join(self.m.mnt, "a"), "a", MiB))
        self.umount_and_wait(pid)

        # and mounts it again when it is not mounted
        r = self.mount("-T", fstab, "-a")
        self.assertEqual(r.returncode, 0, f"stdout: {r.stdout}\nstderr: {r.stderr}")
        pid = self.m.note_daemon()
        self.assertTrue(file_matches(os.path.join(self.m.mnt, "a"), "a", MiB))
        self.umount_and_wait(pid)

    def test_bad_options_fail_clearly(self):
        cases = [
            ("capacty=64M", 1, "--capacty"),            # misspelt: kvfs refuses it
            ("capacity=lots", 1, "capacity"),
            ("durability=sometimes", 1, "durability"),
            ("foreground", 1, "foreground"),
        ]
        for opt, code, word in cases:
            with self.subTest(opt=opt):
                r = self.mount("-t", "fuse.kvfs", "kvfs", self.m.mnt, "-o",
                               f"data_dir={self.m.data},{opt}")
                self.assertEqual(r.returncode, code, f"stdout: {r.stdout}\nstderr: {r.stderr}")
                self.assertIn(word, r.stderr)
                self.assertFalse(_is_mounted(self.m.mnt))

    def test_data_dir_in_use_is_a_mount_failure(self):
        r = self.mount("-t", "fuse.kvfs", "kvfs", self.m.mnt, "-o",
                       f"data_dir={self.m.data},capacity=64M")
        self.assertEqual(r.returncode, 0, r.stderr)
        pid = self.m.note_daemon()
        other = os.path.join(self.m.root, "mnt2")
        os.mkdir(other)
        r = self.mount("-t", "fuse.kvfs", "kvfs", other, "-o",
                       f"data_dir={self.m.data},capacity=64M")
        if _is_mounted(other):
            subprocess.run(["umount", other])
        self.assertEqual(r.returncode, 32, f"stdout: {r.stdout}\nstderr: {r.stderr}")
        self.assertIn("in use", r.stderr)
        self.assertIn("mount.kvfs: kvfs could not mount", r.stderr)
        self.umount_and_wait(pid)


def unit_sections(text):
    """[Section] -> list of (key, value) of a systemd unit file."""
    sections, current = {}, None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), [])
        else:
            key, value = line.split("=", 1)
            current.append((key.strip(), value.strip()))
    return sections


class SystemdUnits(unittest.TestCase):
    def unit_with_built_kvfs(self, tmp):
        """kvfs@.service with ExecStart's bare `kvfs` (resolved by systemd in /usr/local/bin,
        /usr/bin, ...) replaced by this build's binary, so that verify finds the command."""
        text = (UNITS / "kvfs@.service").read_text()
        text = text.replace("\nExecStart=kvfs ",
                            f"\nExecStart={os.path.abspath(default_kvfs_bin())} ")
        with open(os.path.join(tmp, "kvfs@.service"), "w") as f:
            f.write(text)
        return text

    def test_units_parse(self):
        if not shutil.which("systemd-analyze"):
            self.skipTest("systemd-analyze is not installed")
        if not os.access(default_kvfs_bin(), os.X_OK):
            self.skipTest("kvfs is not built")
        tmp = tempfile.mkdtemp(prefix="kvfs-units-")
        self.addCleanup(shutil.rmtree, tmp, True)
        text = self.unit_with_built_kvfs(tmp)
        shutil.copy(UNITS / "mnt-kvfs.mount", tmp)
        for unit in ("kvfs@mnt-kvfs.service", "mnt-kvfs.mount"):
            with self.subTest(unit=unit):
                r = run(["systemd-analyze", "verify", "--man=no", unit], cwd=tmp)
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                self.assertEqual(r.stderr.strip(), "", f"systemd-analyze complains about {unit}")
        # the check has teeth: a broken copy is reported
        with open(os.path.join(tmp, "kvfs@.service"), "w") as f:
            f.write(text.replace("Type=simple", "Type=simpel"))
        r = run(["systemd-analyze", "verify", "--man=no", "kvfs@mnt-kvfs.service"], cwd=tmp)
        self.assertIn("simpel", r.stderr)

    def test_service_start_post_fails_when_kvfs_exits(self):
        service = unit_sections((UNITS / "kvfs@.service").read_text())["Service"]
        (post,) = [v for k, v in service if k == "ExecStartPost"]
        tmp = tempfile.mkdtemp(prefix="kvfs-units-")
        self.addCleanup(shutil.rmtree, tmp, True)
        dead = subprocess.Popen(["true"])
        dead.wait()
        argv = [w.replace("%f", tmp).replace("$$", "$") for w in shlex.split(post)]
        r = run(argv, timeout=90, env=dict(os.environ, MAINPID=str(dead.pid)))
        self.assertEqual(r.returncode, 1, r.stderr)

    def test_mount_unit_matches_helper(self):
        mount = dict(unit_sections((UNITS / "mnt-kvfs.mount").read_text())["Mount"])
        self.assertEqual(mount["Type"], "fuse.kvfs")
        self.assertEqual(mount["Where"], "/mnt/kvfs")
        if os.access(HELPER, os.X_OK):
            tmp = tempfile.mkdtemp(prefix="kvfs-units-")
            self.addCleanup(shutil.rmtree, tmp, True)
            argv, _ = fake_command(mount["What"], tmp, "-o", mount["Options"])
            self.assertIn("--data=/var/lib/kvfs", argv)
            self.assertIn("allow_other", argv[argv.index("-o") + 1].split(","))

    def test_service_commands_mount_and_unmount(self):
        """Runs kvfs@.service's commands the way systemd would (no systemd in a container):
        ExecStartPre, ExecStart in the foreground, ExecStartPost returns once the mount answers,
        ExecStop unmounts and kvfs exits 0."""
        require_mount_rights(self)
        if not os.access(default_kvfs_bin(), os.X_OK):
            self.skipTest("kvfs is not built")
        service = unit_sections((UNITS / "kvfs@.service").read_text())["Service"]
        self.assertIn(("Type", "simple"), service)
        self.assertIn(("Restart", "on-failure"), service)
        m = HelperMount(self)
        escaped = run(["systemd-escape", "--path", m.mnt]).stdout.strip() \
            if shutil.which("systemd-escape") else "instance"
        kvfs_opts = f"--data {m.data} --capacity 64M"

        def argv_of(value):
            ignore = value.startswith("-")
            words = []
            for w in shlex.split(value.lstrip("-")):
                if w == "$KVFS_OPTS":
                    words += kvfs_opts.split()
                    continue
                w = w.replace("%f", m.mnt).replace("%i", escaped).replace("$$", "$")
                words.append(w)
            if words[0] == "kvfs":
                words[0] = os.path.abspath(default_kvfs_bin())
            elif "/" not in words[0]:
                words[0] = shutil.which(words[0])
            return ignore, words

        def commands(key):
            return [argv_of(v) for k, v in service if k == key]

        for ignore, argv in commands("ExecStartPre"):
            r = run(argv)
            self.assertTrue(ignore or r.returncode == 0, f"{argv}: {r.stderr}")
        (_, start), = commands("ExecStart")
        self.assertIn("-f", start)
        log = open(os.path.join(m.root, "kvfs.log"), "w+")
        self.addCleanup(log.close)
        daemon = subprocess.Popen(start, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                  start_new_session=True)
        m.pids.add(daemon.pid)
        self.addCleanup(lambda: daemon.poll() is None and daemon.kill())
        for _, argv in commands("ExecStartPost"):
            r = run(argv, timeout=90, env=dict(os.environ, MAINPID=str(daemon.pid)))
            self.assertEqual(r.returncode, 0, f"{argv}: {r.stderr}")
        self.assertTrue(_is_mounted(m.mnt), "ExecStartPost returned before the mount was there")
        self.assertEqual(read_status(m.mnt)["capacity_bytes"], 64 * MiB)
        for _, argv in commands("ExecStop"):
            r = run(argv)
            self.assertEqual(r.returncode, 0, f"{argv}: {r.stderr}")
        rc = daemon.wait(timeout=30)
        log.seek(0)
        self.assertEqual(rc, 0, log.read())
        self.assertFalse(_is_mounted(m.mnt))


if __name__ == "__main__":
    unittest.main()
