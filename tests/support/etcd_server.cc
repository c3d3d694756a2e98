#include "etcd_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "kvfs/etcd.h"

namespace kvfs::testing {

namespace {

// The low end of the kernel's ephemeral port range (the ports bind(0) and connect(2) draw from).
int EphemeralLow() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 0;
  if (!(in >> low) || low <= 0) return 32768;
  return low;
}

bool CanBind(int port, int* bound) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof a;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  if (ok) *bound = ntohs(a.sin_port);
  ::close(fd);
  return ok;
}

}  // namespace

// A random port below the ephemeral range, not the kernel's pick: bind(0)'s port comes from
// the range every outgoing connection draws from, so another test's client socket could take
// it before the server binds (CI saw etcd exit with "address already in use" that way). Two
// tests picking the same port is the remaining race; EtcdServer::Start retries it.
int FreeLoopbackPort() {
  static thread_local std::mt19937 rng{std::random_device{}()};
  const int low = EphemeralLow();
  const int lo = std::max(10000, low - 12000), hi = low - 1;
  int bound = 0;
  for (int i = 0; i < 200 && hi > lo; ++i) {
    if (CanBind(std::uniform_int_distribution<int>(lo, hi)(rng), &bound)) return bound;
  }
  return CanBind(0, &bound) ? bound : 0;
}

EtcdServer::EtcdServer() {
  char tmpl[] = "/tmp/kvfs-etcd-XXXXXX";
  const char* p = ::mkdtemp(tmpl);
  dir_ = p ? p : "";
  client_port_ = FreeLoopbackPort();
  peer_port_ = FreeLoopbackPort();
}

EtcdServer::~EtcdServer() {
  if (pid_ > 0) {
    Resume();
    Stop();
  }
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

Status EtcdServer::Start() {
  // A first start whose port another test took since FreeLoopbackPort tries new ports; later
  // starts keep them (clients know the endpoint).
  for (int attempt = 0;; ++attempt) {
    Status s = StartOnce();
    if (s.ok() || started_ || attempt == 4 ||
        s.message().find("address already in use") == std::string::npos) {
      if (s.ok()) started_ = true;
      return s;
    }
    client_port_ = FreeLoopbackPort();
    peer_port_ = FreeLoopbackPort();
  }
}

Status EtcdServer::StartOnce() {
  if (pid_ > 0) return Status::Ok();
  const char* env = std::getenv("KVFS_ETCD_BIN");
  const std::string bin = env && *env ? env : "/usr/bin/etcd";
  if (::access(bin.c_str(), X_OK) != 0)
    return Status::Error(ENOENT, bin + " not found: install etcd-server (scripts/install-deps.sh)");
  const std::string client = endpoint();
  const std::string peer = "http://127.0.0.1:" + std::to_string(peer_port_);
  std::vector<std::string> args = {bin,
                                   "--name=kvfs-test",
                                   "--data-dir=" + dir_ + "/data",
                                   "--listen-client-urls=" + client,
                                   "--advertise-client-urls=" + client,
                                   "--listen-peer-urls=" + peer,
                                   "--initial-advertise-peer-urls=" + peer,
                                   "--initial-cluster=kvfs-test=" + peer,
                                   "--logger=zap",
                                   "--log-level=warn"};
  if (tls_) {
    const std::string d = dir_ + "/tls/";
    args.insert(args.end(), {"--cert-file=" + d + "server.pem", "--key-file=" + d + "server.key",
                             "--trusted-ca-file=" + d + "ca.pem", "--client-cert-auth"});
  }
  pid_t pid = ::fork();
  if (pid < 0) return Status::Error(errno, "fork");
  if (pid == 0) {
    int log = ::open((dir_ + "/etcd.log").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (log >= 0) {
      ::dup2(log, 1);
      ::dup2(log, 2);
    }
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  pid_ = pid;
  etcd::ClientOptions o;
  o.endpoints = {client};
  o.tls = client_tls_;
  o.request_timeout = std::chrono::milliseconds(500);
  auto c = etcd::MakeClient(o);
  if (!c.ok()) return c.status();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  Status last;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return Status::IoError("etcd exited during start: " + LogTail());
    }
    etcd::RangeRequest r;
    r.key = "health-check";
    auto res = (*c)->Range(r);
    if (res.ok()) return Status::Ok();
    last = res.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  Kill();
  return Status::Error(ETIMEDOUT, "etcd did not answer within 20 s: " + last.ToString());
}

void EtcdServer::Wait() {
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (::waitpid(pid_, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pid_ = -1;
}

void EtcdServer::Stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGCONT);
  ::kill(pid_, SIGTERM);
  Wait();
}

void EtcdServer::Kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  Wait();
}

void EtcdServer::Pause() {
  if (pid_ > 0) ::kill(pid_, SIGSTOP);
}

void EtcdServer::Resume() {
  if (pid_ > 0) ::kill(pid_, SIGCONT);
}

std::string EtcdServer::LogTail() const {
  std::ifstream in(dir_ + "/etcd.log");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string all = ss.str();
  return all.size() > 2000 ? all.substr(all.size() - 2000) : all;
}

Status EtcdServer::EnableTls() {
  const std::string d = dir_ + "/tls";
  std::error_code ec;
  std::filesystem::create_directories(d, ec);
  if (ec) return Status::Error(ec.value(), "mkdir " + d);
  // EC keys: quick to make. etcd's JSON gateway dials etcd itself with the server's
  // certificate, so with --client-cert-auth that one must allow client authentication too
  // (without it every gateway request fails with "connection closed").
  const std::string key = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string sign = " -CAcreateserial -days 2 -extfile ";
  std::ofstream(d + "/server.ext")
      << "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n";
  std::ofstream(d + "/client.ext") << "extendedKeyUsage=clientAuth\n";
  const std::string cmd =
      "cd " + d + " && exec >openssl.log 2>&1 && set -e" + "; openssl req -x509" + key +
      " -keyout ca.key -out ca.pem -days 2 -subj /CN=kvfs-test-ca" + "; openssl req -x509" + key +
      " -keyout other.key -out other.pem -days 2 -subj /CN=other" + "; openssl req" + key +
      " -keyout server.key -out server.csr -subj /CN=127.0.0.1" +
      "; openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -out server.pem" + sign +
      "server.ext" + "; openssl req" + key +
      " -keyout client.key -out client.csr -subj /CN=kvfs-node" +
      "; openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -out client.pem" + sign +
      "client.ext";
  if (std::system(("sh -c '" + cmd + "'").c_str()) != 0) {
    std::ifstream in(d + "/openssl.log");
    std::stringstream ss;
    ss << in.rdbuf();
    return Status::IoError("making test certificates failed: " + ss.str());
  }
  tls_ = true;
  client_tls_ = {d + "/ca.pem", d + "/client.pem", d + "/client.key"};
  stranger_tls_ = {d + "/other.pem", d + "/other.pem", d + "/other.key"};
  return Status::Ok();
}

Result<std::unique_ptr<etcd::Client>> EtcdServer::NewClient() const {
  etcd::ClientOptions o;
  o.endpoints = {endpoint()};
  o.tls = client_tls_;
  return etcd::MakeClient(o);
}

}  // namespace kvfs::testing
