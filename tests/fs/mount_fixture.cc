#include "mount_fixture.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

namespace kvfs::fs::testing {

bool MountTest::memory_store() const {
  const char* s = std::getenv("KVFS_FS_TEST_STORE");
  return s && std::string(s) == "memory";
}

void MountTest::SetUp() {
  char tmpl[] = "/tmp/kvfs-fs-test.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  base_ = tmpl;
  mnt_ = base_ + "/mnt";
  data_ = base_ + "/data";
  ASSERT_EQ(mkdir(mnt_.c_str(), 0755), 0);
  Start();
}

void MountTest::TearDown() {
  Stop();
  std::error_code ec;
  std::filesystem::remove_all(base_, ec);
}

void MountTest::Start(const std::vector<std::string>& extra) {
  ASSERT_EQ(pid_, -1) << "daemon already running";
  std::vector<std::string> argv = {KVFS_BIN, mnt_, "--data", data_, "-f", "--log-level", "debug"};
  // A test may ask for its own capacity (e.g. a small one to make the cache evict).
  if (std::find(extra.begin(), extra.end(), "--capacity") == extra.end())
    argv.insert(argv.end(), {"--capacity", "256M"});
  if (memory_store()) argv.insert(argv.end(), {"--store", "memory"});
  argv.insert(argv.end(), extra.begin(), extra.end());
  std::string log = base_ + "/daemon.log";
  pid_ = fork();
  ASSERT_GE(pid_, 0);
  if (pid_ == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  std::string status = mnt_ + "/.kvfs/status";
  for (int i = 0; i < 600; ++i) {
    struct stat st;
    if (::stat(status.c_str(), &st) == 0) return;
    int ws;
    if (waitpid(pid_, &ws, WNOHANG) == pid_) {
      pid_ = -1;
      FAIL() << "kvfs exited during start:\n" << DaemonLog();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Stop();
  FAIL() << "kvfs did not mount within 12 s:\n" << DaemonLog();
}

int MountTest::Stop() {
  if (pid_ <= 0) return -1;
  // Unmount first (the daemon then exits by itself); SIGTERM if the mount is busy.
  if (Shell("fusermount3 -u '" + mnt_ + "' 2>/dev/null") != 0) kill(pid_, SIGTERM);
  int ws = 0;
  for (int i = 0; i < 1000; ++i) {
    if (waitpid(pid_, &ws, WNOHANG) == pid_) {
      pid_ = -1;
      return WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Where each thread waits, for the one who reads the failure (seen once in hundreds of runs).
  ADD_FAILURE() << "kvfs did not stop; killing it\n"
                << ThreadsOf(pid_) << "--- daemon log ---\n"
                << DaemonLog();
  kill(pid_, SIGKILL);
  waitpid(pid_, &ws, 0);
  Shell("fusermount3 -u -z '" + mnt_ + "' 2>/dev/null");
  pid_ = -1;
  return -1;
}

std::map<std::string, uint64_t> MountTest::Stats() const {
  std::map<std::string, uint64_t> out;
  std::istringstream in(ReadFile(P(".kvfs/stats")));
  std::string key;
  double value;
  while (in >> key >> value) out[key] = static_cast<uint64_t>(value);
  return out;
}

void MountTest::WaitNoOpenFiles() const {
  for (int i = 0; i < 1000 && Stats()["open_files"] > 0; ++i) usleep(5000);
  ASSERT_EQ(Stats()["open_files"], 0u) << "a handle was not released within 5 s";
}

std::string MountTest::ThreadsOf(pid_t pid) {
  std::ostringstream out;
  std::error_code ec;
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
    auto read = [&](const char* what) {
      std::ifstream in(task.path() / what);
      std::stringstream ss;
      ss << in.rdbuf();
      return ss.str();
    };
    out << "thread " << task.path().filename().string() << " " << read("comm") << "  wchan "
        << read("wchan") << "\n"
        << read("stack");
  }
  return out.str();
}

std::string MountTest::DaemonLog() const {
  std::ifstream in(base_ + "/daemon.log");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > 8000 ? s.substr(s.size() - 8000) : s;
}

void MountTest::WriteFile(const std::string& path, const std::string& data, int flags) {
  int fd = open(path.c_str(), flags, 0644);
  ASSERT_GE(fd, 0) << path << ": " << strerror(errno);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    ASSERT_GT(n, 0) << strerror(errno);
    done += static_cast<size_t>(n);
  }
  ASSERT_EQ(close(fd), 0) << strerror(errno);
}

std::string MountTest::ReadFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return "<open failed: " + std::string(strerror(errno)) + ">";
  std::string out;
  char buf[1 << 16];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  close(fd);
  return out;
}

std::string MountTest::RandomBytes(size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = rng();
    std::memcpy(s.data() + i, &v, std::min<size_t>(8, n - i));
  }
  return s;
}

int MountTest::Shell(const std::string& cmd, std::string* out) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  std::string o;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) o.append(buf, n);
  int st = pclose(p);
  if (out) *out = o;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace kvfs::fs::testing
