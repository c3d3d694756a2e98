#include "hang_watch.h"

#include <dirent.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kvfs::testing {
namespace {

// Async-signal-safe: backtrace() is (once loaded, see below) and backtrace_symbols_fd writes
// without malloc.
void DumpThisThread(int) {
  char line[64];
  const int n = std::snprintf(line, sizeof(line), "--- thread %ld\n", syscall(SYS_gettid));
  if (n > 0) (void)!::write(STDERR_FILENO, line, static_cast<size_t>(n));
  void* frames[64];
  const int depth = ::backtrace(frames, 64);
  ::backtrace_symbols_fd(frames, depth, STDERR_FILENO);
}

void DumpAllThreads() {
  struct sigaction sa {};
  sa.sa_handler = DumpThisThread;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGUSR2, &sa, nullptr);
  const pid_t pid = ::getpid();
  const long self = syscall(SYS_gettid);
  DIR* dir = ::opendir("/proc/self/task");
  if (dir == nullptr) return;
  while (dirent* e = ::readdir(dir)) {
    const long tid = std::strtol(e->d_name, nullptr, 10);
    if (tid <= 0 || tid == self) continue;
    syscall(SYS_tgkill, pid, tid, SIGUSR2);
    ::usleep(200 * 1000);  // one stack at a time on stderr
  }
  ::closedir(dir);
}

}  // namespace

HangWatch::HangWatch(std::chrono::seconds limit) : limit_(limit) {
  void* warm[1];
  ::backtrace(warm, 1);  // loads libgcc now, not inside a signal handler
  thread_ = std::thread([this] { Watch(); });
}

HangWatch::~HangWatch() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void HangWatch::Step(std::string where) {
  std::lock_guard lock(mu_);
  where_ = std::move(where);
  ++steps_;
  cv_.notify_all();
}

void HangWatch::Watch() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    const uint64_t seen = steps_;
    if (cv_.wait_for(lock, limit_, [&] { return stop_ || steps_ != seen; })) continue;
    std::fprintf(stderr, "HangWatch: no progress for %llds, last step: %s; every thread's stack:\n",
                 static_cast<long long>(limit_.count()), where_.c_str());
    std::fflush(stderr);
    DumpAllThreads();
    std::abort();
  }
}

}  // namespace kvfs::testing
