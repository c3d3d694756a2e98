// Two kvfs daemons as a cluster on loopback (127.0.0.2 and 127.0.0.3), each on its own
// mountpoint and data dir: a file published through one mount is found (also after a cached
// miss), read byte-exact, renamed and unlinked through the other; .kvfs/nodes and
// user.kvfs.location answer; a node restarted alone keeps its names. Plus the single-node
// answers of the same two views. Daemons are stopped by PID, mounts unmounted, data removed.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

// A free TCP port on `host` (bound with port 0, then released).
uint16_t FreePort(const char* host) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, host, &a.sin_addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return 0;
  }
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

bool WaitFor(const std::function<bool()>& cond, int seconds = 10) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return cond();
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "<cannot open " + path + ">";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& data) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0) << path << ": " << strerror(errno);
  ASSERT_EQ(write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
  ASSERT_EQ(close(fd), 0);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

struct Daemon {
  std::string mnt, data, log;
  pid_t pid = -1;
};

class ClusterMountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvfs-cluster-mount.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    secret_ = base_ + "/secret";
    std::ofstream(secret_) << "two-node-smoke-test-secret-0123456789\n";
    chmod(secret_.c_str(), 0600);
    for (int i = 0; i < 2; ++i) {
      Daemon& d = nodes_[i];
      d.mnt = base_ + "/mnt" + std::to_string(i + 1);
      d.data = base_ + "/data" + std::to_string(i + 1);
      d.log = base_ + "/node" + std::to_string(i + 1) + ".log";
      ASSERT_EQ(mkdir(d.mnt.c_str(), 0755), 0);
    }
    ports_[0] = FreePort(kHosts[0]);
    ports_[1] = FreePort(kHosts[1]);
    ASSERT_NE(ports_[0], 0);
    ASSERT_NE(ports_[1], 0);
  }
  void TearDown() override {
    for (int i = 0; i < 2; ++i) Stop(i);
    std::error_code ec;
    std::filesystem::remove_all(base_, ec);
  }

  std::string Addr(int i) const { return std::string(kHosts[i]) + ":" + std::to_string(ports_[i]); }

  // Node i+1; `with_peer` lists the other node.
  void Start(int i, bool with_peer = true) {
    Daemon& d = nodes_[i];
    ASSERT_EQ(d.pid, -1);
    std::vector<std::string> argv = {KVFS_BIN,
                                     d.mnt,
                                     "--data",
                                     d.data,
                                     "-f",
                                     "--capacity",
                                     "256M",
                                     "--log-level",
                                     "debug",
                                     "--node-id",
                                     std::to_string(i + 1),
                                     "--listen",
                                     Addr(i),
                                     "--secret-file",
                                     secret_,
                                     "--transport",
                                     "tcp",
                                     "--request-timeout",
                                     "500"};
    if (with_peer) {
      const int o = 1 - i;
      argv.push_back("--peer");
      argv.push_back(std::to_string(o + 1) + "=" + Addr(o));
    } else {
      // Alone but still a cluster node: a peer that never answers (nothing listens there).
      argv.push_back("--peer");
      argv.push_back("9=127.0.0.9:" + std::to_string(FreePort("127.0.0.9")));
    }
    d.pid = fork();
    ASSERT_GE(d.pid, 0);
    if (d.pid == 0) {
      int fd = open(d.log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
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
    const std::string status = d.mnt + "/.kvfs/status";
    ASSERT_TRUE(WaitFor(
        [&] {
          int ws;
          if (waitpid(d.pid, &ws, WNOHANG) == d.pid) {
            d.pid = -1;
            return true;
          }
          return Exists(status);
        },
        20))
        << "node " << i + 1 << " did not mount:\n"
        << ReadAll(d.log);
    ASSERT_NE(d.pid, -1) << "node " << i + 1 << " exited during start:\n" << ReadAll(d.log);
  }

  void Stop(int i) {
    Daemon& d = nodes_[i];
    if (d.pid <= 0) return;
    if (system(("fusermount3 -u '" + d.mnt + "' 2>/dev/null").c_str()) != 0) kill(d.pid, SIGTERM);
    int ws = 0;
    if (!WaitFor([&] { return waitpid(d.pid, &ws, WNOHANG) == d.pid; }, 20)) {
      ADD_FAILURE() << "node " << i + 1 << " did not stop";
      kill(d.pid, SIGKILL);
      waitpid(d.pid, &ws, 0);
      (void)!system(("fusermount3 -u -z '" + d.mnt + "' 2>/dev/null").c_str());
    } else {
      EXPECT_TRUE(WIFEXITED(ws) && WEXITSTATUS(ws) == 0)
          << "node " << i + 1 << " exit status " << ws << "\n"
          << ReadAll(d.log);
    }
    d.pid = -1;
  }

  std::string M(int i, const std::string& rel) const { return nodes_[i].mnt + "/" + rel; }

  static std::string Xattr(const std::string& path, const char* name) {
    char buf[4096];
    ssize_t n = getxattr(path.c_str(), name, buf, sizeof buf);
    return n < 0 ? "" : std::string(buf, static_cast<size_t>(n));
  }

  static std::string Random(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    return s;
  }

  static constexpr const char* kHosts[2] = {"127.0.0.2", "127.0.0.3"};
  std::string base_, secret_;
  Daemon nodes_[2];
  uint16_t ports_[2] = {0, 0};
};

TEST_F(ClusterMountTest, PublishOnOneNodeIsSeenReadRenamedAndUnlinkedOnTheOther) {
  Start(0);
  Start(1);
  // A miss first, so node 2's kernel may hold a negative dentry for the name.
  EXPECT_FALSE(Exists(M(1, "chunk-a")));
  ASSERT_EQ(mkdir(M(0, "llama").c_str(), 0755), 0);
  const std::string data = Random(3 << 20, 7);
  WriteAll(M(0, "llama/chunk-a.tmp"), data);
  ASSERT_EQ(rename(M(0, "llama/chunk-a.tmp").c_str(), M(0, "chunk-a").c_str()), 0);

  ASSERT_TRUE(WaitFor([&] { return Exists(M(1, "chunk-a")); })) << ReadAll(nodes_[1].log);
  EXPECT_EQ(ReadAll(M(1, "chunk-a")), data);
  EXPECT_TRUE(Exists(M(1, "llama")));
  EXPECT_FALSE(Exists(M(1, "llama/chunk-a.tmp")));

  // Where the chunk lives, seen from node 2.
  auto loc = nlohmann::json::parse(Xattr(M(1, "chunk-a"), "user.kvfs.location"));
  EXPECT_FALSE(loc["chunk_key"].get<std::string>().empty()) << loc.dump();
  EXPECT_FALSE(loc["replicas"].empty()) << loc.dump();
  EXPECT_FALSE(loc["holders"].empty()) << loc.dump();

  // The cluster as node 2 sees it.
  auto nodes = nlohmann::json::parse(ReadAll(M(1, ".kvfs/nodes")));
  EXPECT_EQ(nodes["self"], 2);
  EXPECT_EQ(nodes["transport"], "tcp");
  ASSERT_EQ(nodes["nodes"].size(), 2u) << nodes.dump();
  EXPECT_EQ(nodes["nodes"][0]["id"], 1);
  EXPECT_EQ(nodes["nodes"][0]["state"], "up");
  EXPECT_EQ(nodes["nodes"][0]["address"], Addr(0));
  EXPECT_EQ(nodes["nodes"][1]["state"], "self");
  EXPECT_GT(nodes["nodes"][1]["pushes_received"].get<uint64_t>(), 0u);

  // A rename and an unlink on node 1 reach node 2; so does a new version.
  ASSERT_EQ(rename(M(0, "chunk-a").c_str(), M(0, "llama/chunk-b").c_str()), 0);
  ASSERT_TRUE(WaitFor([&] { return Exists(M(1, "llama/chunk-b")) && !Exists(M(1, "chunk-a")); }));
  EXPECT_EQ(ReadAll(M(1, "llama/chunk-b")), data);
  const std::string v2 = Random(1 << 20, 8);
  WriteAll(M(0, "llama/chunk-b"), v2);
  ASSERT_TRUE(WaitFor([&] { return ReadAll(M(1, "llama/chunk-b")) == v2; }));
  ASSERT_EQ(unlink(M(0, "llama/chunk-b").c_str()), 0);
  ASSERT_TRUE(WaitFor([&] { return !Exists(M(1, "llama/chunk-b")); }));

  // And the other way round.
  WriteAll(M(1, "from-two"), "hello from node 2");
  ASSERT_TRUE(WaitFor([&] { return Exists(M(0, "from-two")); }));
  EXPECT_EQ(ReadAll(M(0, "from-two")), "hello from node 2");
}

TEST_F(ClusterMountTest, ANodeRestartedAloneKeepsItsNames) {
  Start(0);
  Start(1);
  const std::string data = Random(1 << 20, 9);
  ASSERT_EQ(mkdir(M(0, "d").c_str(), 0755), 0);
  WriteAll(M(0, "d/kept"), data);
  ASSERT_TRUE(WaitFor([&] { return Exists(M(1, "d/kept")); }));
  Stop(1);
  Stop(0);
  // Node 1 comes back with nobody to pull from.
  Start(0, /*with_peer=*/false);
  EXPECT_EQ(ReadAll(M(0, "d/kept")), data);
  auto nodes = nlohmann::json::parse(ReadAll(M(0, ".kvfs/nodes")));
  EXPECT_EQ(nodes["self"], 1);
  Stop(0);
  // Node 2 alone too: it has the name from its own snapshot and the chunk only if it was
  // placed there; its listing must show the name either way.
  Start(1, /*with_peer=*/false);
  EXPECT_TRUE(Exists(M(1, "d/kept")));
}

TEST_F(ClusterMountTest, EvictingOneCopyKeepsTheNameWhileAnotherNodeHoldsIt) {
  Start(0);
  Start(1);
  const std::string data = Random(2 << 20, 11);
  WriteAll(M(0, "hot"), data);
  ASSERT_TRUE(WaitFor([&] { return Exists(M(1, "hot")); }));
  // Two nodes, two replicas: both hold a copy.
  auto before = nlohmann::json::parse(Xattr(M(1, "hot"), "user.kvfs.location"));
  ASSERT_EQ(before["local"], true) << before.dump();
  // Node 2 drops its copy: the name stays on both nodes and node 2 reads from node 1.
  ASSERT_EQ(setxattr(M(1, "hot").c_str(), "user.kvfs.evict", "1", 1, 0), 0) << strerror(errno);
  auto after = nlohmann::json::parse(Xattr(M(1, "hot"), "user.kvfs.location"));
  EXPECT_EQ(after["local"], false) << after.dump();
  EXPECT_TRUE(Exists(M(1, "hot")));
  EXPECT_TRUE(Exists(M(0, "hot")));
  EXPECT_EQ(ReadAll(M(1, "hot")), data);
  // Nothing left to evict on node 2.
  EXPECT_NE(setxattr(M(1, "hot").c_str(), "user.kvfs.evict", "1", 1, 0), 0);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(ClusterMountTest, HardLinksAndSpecialFilesReachTheOtherNode) {
  Start(0);
  Start(1);
  const std::string data = Random(1 << 20, 12);
  ASSERT_EQ(mkdir(M(0, "d").c_str(), 0755), 0);
  WriteAll(M(0, "a"), data);
  ASSERT_EQ(link(M(0, "a").c_str(), M(0, "d/a2").c_str()), 0) << strerror(errno);
  ASSERT_EQ(mkfifo(M(0, "fifo").c_str(), 0640), 0) << strerror(errno);
  auto nlink = [](const std::string& p) {
    struct stat st;
    return ::lstat(p.c_str(), &st) == 0 ? static_cast<int>(st.st_nlink) : -1;
  };
  ASSERT_TRUE(WaitFor([&] { return Exists(M(1, "d/a2")) && Exists(M(1, "fifo")); }))
      << ReadAll(nodes_[1].log);
  EXPECT_EQ(ReadAll(M(1, "d/a2")), data);
  EXPECT_EQ(nlink(M(1, "a")), 2);
  struct stat f;
  ASSERT_EQ(::lstat(M(1, "fifo").c_str(), &f), 0);
  EXPECT_TRUE(S_ISFIFO(f.st_mode));
  EXPECT_EQ(f.st_mode & 07777, 0640u);
  // One name goes on node 2: node 1 keeps the other, with one link.
  ASSERT_EQ(unlink(M(1, "a").c_str()), 0);
  ASSERT_TRUE(WaitFor([&] { return !Exists(M(0, "a")) && nlink(M(0, "d/a2")) == 1; }));
  EXPECT_EQ(ReadAll(M(0, "d/a2")), data);
  // A link made on node 2 after a restart of node 1 arrives too.
  Stop(0);
  Start(0);
  ASSERT_EQ(link(M(1, "d/a2").c_str(), M(1, "back").c_str()), 0) << strerror(errno);
  ASSERT_TRUE(WaitFor([&] { return Exists(M(0, "back")) && nlink(M(0, "d/a2")) == 2; }))
      << ReadAll(nodes_[0].log);
  EXPECT_EQ(ReadAll(M(0, "back")), data);
}

TEST_F(ClusterMountTest, SingleNodeViews) {
  Daemon& d = nodes_[0];
  std::vector<std::string> argv = {KVFS_BIN, d.mnt, "--data", d.data, "-f", "--capacity", "256M"};
  d.pid = fork();
  ASSERT_GE(d.pid, 0);
  if (d.pid == 0) {
    int fd = open(d.log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
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
  ASSERT_TRUE(WaitFor([&] { return Exists(d.mnt + "/.kvfs/status"); })) << ReadAll(d.log);
  auto nodes = nlohmann::json::parse(ReadAll(M(0, ".kvfs/nodes")));
  EXPECT_EQ(nodes["self"], 0);
  ASSERT_EQ(nodes["nodes"].size(), 1u);
  EXPECT_EQ(nodes["nodes"][0]["id"], 0);
  EXPECT_EQ(nodes["nodes"][0]["state"], "self");
  EXPECT_GT(nodes["nodes"][0]["capacity_bytes"].get<uint64_t>(), 0u);
  WriteAll(M(0, "f"), "x");
  auto loc = nlohmann::json::parse(Xattr(M(0, "f"), "user.kvfs.location"));
  EXPECT_EQ(loc["chunk_key"], "");
  EXPECT_TRUE(loc["replicas"].empty());
  EXPECT_EQ(loc["local"], true);
  ASSERT_EQ(loc["holders"].size(), 1u);
  EXPECT_EQ(loc["holders"][0]["state"], "self");
}

}  // namespace
