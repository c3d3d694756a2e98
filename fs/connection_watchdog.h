// ConnectionWatchdog: ends the daemon's FUSE connection should the daemon die without ending it.
//
// A daemon killed (SIGKILL, a crash) normally takes its connection with it: its /dev/fuse
// descriptor closes and the kernel fails every request in flight with ENOTCONN. Not when one of
// its threads sleeps in the kernel uninterruptibly: the notifier's invalidation waits for a
// lock (a directory's, a page's) held by a process whose own request to the daemon is still
// unanswered. That thread cannot die, so the descriptor never closes, the request is never
// answered and the lock never released: the process in the mount, the daemon (an unreapable
// zombie) and the mount hang for ever, until someone writes fusectl's abort file.
//
// The watchdog is a small process of its own (this binary, run with kWatchdogFlag), started by
// the daemon's main thread once mounted and told by the kernel when that thread dies
// (PR_SET_PDEATHSIG). It holds nothing of the daemon's while it waits, so a daemon that dies
// the usual way ends its connection at once, as without it. When a thread of the dead daemon is
// still there a second later, the watchdog borrows the daemon's /dev/fuse descriptor from that
// thread (pidfd_getfd): if the kernel has not ended that connection, its number is still the
// daemon's, and the watchdog aborts it (fusectl), which fails the stuck request and lets the
// thread go. A clean shutdown stops the watchdog first.
#pragma once

#include <sys/types.h>

#include <string>

#include "kvfs/status.h"

namespace kvfs::fs {

// argv[1] of the watchdog process: kvfs --connection-watchdog PID CONNECTION FD LOG MOUNTPOINT
// (FD: the daemon's /dev/fuse descriptor number).
inline constexpr char kWatchdogFlag[] = "--connection-watchdog";

class ConnectionWatchdog {
 public:
  ConnectionWatchdog() = default;
  ConnectionWatchdog(const ConnectionWatchdog&) = delete;
  ConnectionWatchdog& operator=(const ConnectionWatchdog&) = delete;
  ~ConnectionWatchdog() { Stop(); }

  // Starts the watchdog of connection `connection` (the mount's device minor), whose /dev/fuse
  // descriptor is `fuse_fd`. Must be called from the thread that lives as long as the daemon
  // (the kernel signals the death of the thread that started the process). `log`: a file the
  // watchdog appends its one line to, or empty for stderr; `mountpoint` is shown in ps.
  Status Start(int fuse_fd, unsigned connection, const std::string& log,
               const std::string& mountpoint);
  // Stops and reaps it (a clean shutdown). Idempotent.
  void Stop();

 private:
  pid_t pid_ = -1;
};

// The watchdog process's main (argv as above).
int ConnectionWatchdogMain(int argc, char** argv);

// Aborts FUSE connection `connection` through fusectl (/sys/fs/fuse/connections/N/abort),
// mounting fusectl there first if it is not (systemd does at boot; containers often do not).
Status AbortFuseConnection(unsigned connection);

}  // namespace kvfs::fs
