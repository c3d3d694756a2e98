#include "child_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>
#include <thread>

#include "etcd_server.h"

namespace remotebench {

using namespace std::chrono_literals;

kvfs::Status ChildProcess::Start(const std::vector<std::string>& argv,
                                 const std::string& log_path) {
  if (running()) return kvfs::Status::Invalid("already running");
  if (argv.empty()) return kvfs::Status::Invalid("no command");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (log < 0) return kvfs::Status::Error(errno, "cannot open " + log_path);
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(log);
    return kvfs::Status::Error(err, "fork");
  }
  if (pid == 0) {
    // Child: only async-signal-safe calls until exec.
    ::dup2(log, 1);
    ::dup2(log, 2);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(log);
  pid_ = pid;
  return kvfs::Status::Ok();
}

kvfs::Result<int> ChildProcess::Wait(std::chrono::milliseconds limit) {
  if (!running()) return kvfs::Status::Invalid("not running");
  const auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (r < 0 && errno != EINTR) return kvfs::Status::Error(errno, "waitpid");
    if (std::chrono::steady_clock::now() > end) {
      return kvfs::Status::Error(ETIMEDOUT, "process did not exit in time");
    }
    std::this_thread::sleep_for(10ms);
  }
}

void ChildProcess::Stop() {
  if (!running()) return;
  ::kill(pid_, SIGTERM);
  if (Wait(3000ms).ok()) return;
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  pid_ = -1;
}

double ChildProcess::CpuSeconds() const {
  if (!running()) return 0;
  std::string stat = ReadFile("/proc/" + std::to_string(pid_) + "/stat");
  // Fields after the command name (which may hold spaces), from ") ": state is field 3,
  // utime 14, stime 15.
  const size_t close = stat.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream in(stat.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && in >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

bool WaitForPort(uint16_t port, std::chrono::milliseconds limit) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return false;
    struct sockaddr_in a {};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
    ::close(fd);
    if (ok) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

kvfs::Result<uint16_t> FreePort() {
  const int port = kvfs::testing::FreeLoopbackPort();  // below the ephemeral range: see there
  if (port <= 0) return kvfs::Status::Error(EADDRINUSE, "no free loopback port");
  return static_cast<uint16_t>(port);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace remotebench
