#include "connection_watchdog.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <string_view>
#include <vector>

extern char** environ;

namespace kvfs::fs {
namespace {

constexpr char kFusectl[] = "/sys/fs/fuse/connections";
// pidfd_open's flag for a pidfd of one thread (Linux 6.9; not in Debian 12's headers).
constexpr unsigned kPidfdThread = O_EXCL;
// How long the daemon's other threads may take to die after its main thread did, before the
// watchdog takes one of them for stuck in the kernel.
constexpr int kThreadsGraceMs = 1000;

// The signal the kernel sends the watchdog when the daemon's main thread dies; SIGTERM is the
// daemon's "stand down".
constexpr int kDeathSignal = SIGUSR1;

template <typename T>
bool ParseNumber(std::string_view s, T* out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && end == s.data() + s.size();
}

// The threads of `pid` still listed under /proc (the main thread stays there as a zombie).
std::vector<pid_t> Threads(pid_t pid) {
  std::vector<pid_t> tids;
  DIR* d = opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
  if (!d) return tids;
  while (dirent* e = readdir(d)) {
    pid_t tid = 0;
    if (ParseNumber(std::string_view(e->d_name), &tid)) tids.push_back(tid);
  }
  closedir(d);
  return tids;
}

// Raw syscalls: Debian 12's <sys/pidfd.h> declares them without C linkage for C++.
int PidfdOpen(pid_t pid, unsigned flags) {
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, flags));
}

// Whether the process behind `pidfd` has exited, every thread of it (a pidfd turns readable
// then, for good). While it has not, its pid and the ids of its listed threads are its own.
bool Exited(int pidfd) {
  pollfd p{pidfd, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1;
}

// Whether the main thread of `pid` has exited while other threads of it may live on: it stays
// listed as a zombie then. Read while the daemon's pidfd says it has not exited, so `pid` is
// still the daemon's.
bool MainThreadExited(pid_t pid) {
  char buf[512];
  const int fd = ::open(("/proc/" + std::to_string(pid) + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;
  const ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) return true;
  const std::string_view stat(buf, static_cast<size_t>(n));
  const size_t paren = stat.rfind(')');
  if (paren == std::string_view::npos || paren + 2 >= stat.size()) return false;
  const char state = stat[paren + 2];
  return state == 'Z' || state == 'X';
}

// A copy of descriptor `fd` of the daemon `pid`, taken from one of its threads still alive
// (the main thread is gone: its own table is), or -1.
int BorrowDaemonFd(pid_t pid, int fd) {
  for (pid_t tid : Threads(pid)) {
    int pidfd = PidfdOpen(tid, tid == pid ? 0 : kPidfdThread);
    if (pidfd < 0) continue;
    // The pidfd pins `tid`: if it is still listed under the daemon now, it is the daemon's
    // thread and not a new one that took the id of a thread that exited since the listing.
    const std::string task = "/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid);
    int copy = ::access(task.c_str(), F_OK) == 0
                   ? static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, fd, 0))
                   : -1;
    ::close(pidfd);
    if (copy >= 0) return copy;
  }
  return -1;
}

// Whether `fd` is a FUSE device whose connection the kernel has ended (POLLERR: aborted, or
// its file system unmounted and destroyed, after which its number may name another mount).
bool ConnectionEnded(int fd) {
  pollfd p{fd, 0, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLNVAL));
}

void Log(const std::string& log, const std::string& level, const std::string& message) {
  char when[64];
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
  std::string line =
      std::string("[") + when + "] [kvfs-watchdog] [" + level + "] " + message + "\n";
  int fd = log.empty() ? 2 : ::open(log.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) return;
  (void)!::write(fd, line.data(), line.size());
  if (fd != 2) ::close(fd);
}

}  // namespace

Status AbortFuseConnection(unsigned connection) {
  const std::string abort_file =
      std::string(kFusectl) + "/" + std::to_string(connection) + "/abort";
  if (::access(abort_file.c_str(), F_OK) != 0 &&
      ::mount("fusectl", kFusectl, "fusectl", 0, nullptr) != 0 && errno != EBUSY) {
    return Status::Error(errno, std::string("cannot mount fusectl on ") + kFusectl);
  }
  int fd = ::open(abort_file.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return Status::Error(errno, "cannot open " + abort_file);
  ssize_t n = ::write(fd, "1", 1);
  int err = errno;
  ::close(fd);
  if (n != 1) return Status::Error(err, "cannot write " + abort_file);
  return Status::Ok();
}

Status ConnectionWatchdog::Start(int fuse_fd, unsigned connection, const std::string& log,
                                 const std::string& mountpoint) {
  if (pid_ > 0) return Status::Ok();
  const std::string self = std::to_string(::getpid());
  const std::string conn = std::to_string(connection);
  std::vector<std::string> args = {"kvfs",    kWatchdogFlag,           self,
                                   conn,      std::to_string(fuse_fd), log.empty() ? "-" : log,
                                   mountpoint};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addclosefrom_np(&fa, 3);  // nothing of the daemon's is held
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  // The death signal and the stand-down wait blocked for sigwait; a terminal's SIGINT/SIGHUP
  // to the daemon's group must not take the watchdog away before the daemon stops it.
  sigset_t mask;
  sigemptyset(&mask);
  for (int s : {kDeathSignal, SIGTERM, SIGINT, SIGHUP}) sigaddset(&mask, s);
  posix_spawnattr_setsigmask(&attr, &mask);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, "/proc/self/exe", &fa, &attr, argv.data(), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return Status::Error(rc, "cannot start the connection watchdog");
  pid_ = pid;
  return Status::Ok();
}

void ConnectionWatchdog::Stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

int ConnectionWatchdogMain(int argc, char** argv) {
  pid_t daemon = 0;
  unsigned connection = 0;
  int fuse_fd = -1;
  if (argc != 7 || !ParseNumber(std::string_view(argv[2]), &daemon) ||
      !ParseNumber(std::string_view(argv[3]), &connection) ||
      !ParseNumber(std::string_view(argv[4]), &fuse_fd)) {
    std::fprintf(stderr, "kvfs: %s is started by the kvfs daemon, not by hand\n", kWatchdogFlag);
    return 2;
  }
  const std::string log = std::string_view(argv[5]) == "-" ? "" : argv[5];
  sigset_t wait_for;
  sigemptyset(&wait_for);
  sigaddset(&wait_for, kDeathSignal);
  sigaddset(&wait_for, SIGTERM);
  ::prctl(PR_SET_PDEATHSIG, kDeathSignal);
  // Held from while `daemon` is surely the daemon (our parent): once the daemon is gone for
  // good its pid may name another process, whose descriptors must not be taken for its.
  const int daemon_pidfd = PidfdOpen(daemon, 0);
  // The daemon died before the lines above (the parent is already another): it is gone, and
  // its pid may name another process by now.
  if (daemon_pidfd < 0 || ::getppid() != daemon) return 0;
  // The kernel's signal may never come: a daemon killed while this process was starting (before
  // the prctl above) made another of its threads our parent, still the daemon for getppid(),
  // and a thread stuck in the kernel never exits. So the main thread is also looked at, once a
  // second: a zombie main thread is the daemon's death.
  for (;;) {
    const timespec second{1, 0};
    const int sig = sigtimedwait(&wait_for, nullptr, &second);
    if (sig == SIGTERM) return 0;  // a clean shutdown
    if (sig == kDeathSignal) break;
    if (Exited(daemon_pidfd)) return 0;  // gone, every thread of it, and its connection with it
    if (MainThreadExited(daemon)) break;
  }
  // The daemon's main thread is gone; the others normally follow within milliseconds, and the
  // last one closes /dev/fuse, which ends the connection. The pidfd turns readable then.
  pollfd exited{daemon_pidfd, POLLIN, 0};
  if (::poll(&exited, 1, kThreadsGraceMs) != 0) return 0;  // exited, or cannot be watched
  // A thread is stuck in the kernel, holding the daemon's /dev/fuse open. The connection is
  // aborted only when that very device says it is still connected: then `connection` (its
  // mount's device number, freed only once the kernel ends it) cannot name another mount.
  const std::string who =
      "daemon " + std::to_string(daemon) + " died with a thread stuck in the kernel";
  const std::string by_hand = std::string("; write 1 to ") + kFusectl + "/" +
                              std::to_string(connection) + "/abort if processes hang in its mount";
  int device = BorrowDaemonFd(daemon, fuse_fd);
  if (device >= 0 && Exited(daemon_pidfd)) {  // exited meanwhile: `daemon` may be another now
    ::close(device);
    return 0;
  }
  if (device < 0) {
    Log(log, "error",
        who + ", and its /dev/fuse cannot be checked (" + std::strerror(errno) + ")" + by_hand);
    return 1;
  }
  if (ConnectionEnded(device)) {  // ended meanwhile (unmounted, or aborted by hand)
    ::close(device);
    return 0;
  }
  Status st = AbortFuseConnection(connection);
  ::close(device);
  if (!st.ok()) {
    Log(log, "error",
        who + "; cannot abort FUSE connection " + std::to_string(connection) + ": " +
            st.ToString() + by_hand);
    return 1;
  }
  Log(log, "warning",
      who + "; aborted FUSE connection " + std::to_string(connection) +
          " (its requests fail with ENOTCONN)");
  return 0;
}

}  // namespace kvfs::fs
