#include "daemon.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace kvfs::bench {

Status Daemon::Start(const std::string& kvfs_bin, const std::string& mount, const std::string& data,
                     const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kvfs_bin, mount, "--data", data, "-f"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string status = mount + "/.kvfs/status";
  return Launch(argv, mount, data + ".bench.log", [status] {
    struct stat st;
    return ::stat(status.c_str(), &st) == 0;
  });
}

Status Daemon::StartFuse(const std::vector<std::string>& argv, const std::string& mount,
                         const std::string& log) {
  std::string parent = mount + "/..";
  return Launch(argv, mount, log, [mount, parent] {
    struct stat m, p;
    return ::stat(mount.c_str(), &m) == 0 && ::stat(parent.c_str(), &p) == 0 &&
           m.st_dev != p.st_dev;
  });
}

Status Daemon::Launch(const std::vector<std::string>& argv, const std::string& mount,
                      const std::string& log, const std::function<bool()>& ready) {
  mount_ = mount;
  pid_ = fork();
  if (pid_ < 0) return Status::Error(errno, "fork");
  if (pid_ == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<std::string> copy = argv;
    std::vector<char*> cargv;
    for (auto& a : copy) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  for (int i = 0; i < 400; ++i) {
    if (ready()) return Status::Ok();
    int wstatus;
    if (waitpid(pid_, &wstatus, WNOHANG) == pid_) {
      pid_ = -1;
      return Status::Error(EIO, argv[0] + " exited during start; see " + log);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Stop();
  return Status::Error(ETIMEDOUT, argv[0] + " did not mount within 20 s; see " + log);
}

void Daemon::Stop() {
  if (pid_ <= 0) return;
  std::string cmd = "fusermount3 -u '" + mount_ + "' 2>/dev/null";
  if (std::system(cmd.c_str()) != 0) kill(pid_, SIGTERM);
  for (int i = 0; i < 200; ++i) {
    int wstatus;
    if (waitpid(pid_, &wstatus, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  std::system(("fusermount3 -u -z '" + mount_ + "' 2>/dev/null").c_str());
  pid_ = -1;
}

int64_t Daemon::BytesRead() const {
  if (pid_ <= 0) return -1;
  std::ifstream in(mount_ + "/.kvfs/status");
  auto status = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!status.is_object()) return -1;
  auto it = status.find("bytes_read");
  return it != status.end() && it->is_number_integer() ? it->get<int64_t>() : -1;
}

double Daemon::CpuSeconds() const {
  if (pid_ <= 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pid_) + "/stat");
  std::string line;
  std::getline(in, line);
  // Fields after the parenthesised command name: utime is field 14, stime 15.
  auto close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

}  // namespace kvfs::bench
