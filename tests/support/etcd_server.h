// EtcdServer: a real etcd (Debian's etcd-server) for one test, on 127.0.0.1 at free ports with
// its own data directory. Started by the constructor's Start(), stopped by PID (SIGTERM, then
// SIGKILL) and its directory removed by the destructor. KVFS_ETCD_BIN overrides the binary.
//
//   EtcdServer etcd;
//   ASSERT_TRUE(etcd.Start().ok());
//   options.endpoints = {etcd.endpoint()};
//   etcd.Pause(); ... etcd.Resume();        // SIGSTOP / SIGCONT: a frozen etcd
//   etcd.Kill(); etcd.Start();              // kill -9 and a restart on the same ports and data
//   etcd.EnableTls(); etcd.Start();         // https, client certificates required
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "kvfs/etcd.h"
#include "kvfs/status.h"

namespace kvfs::testing {

class EtcdServer {
 public:
  EtcdServer();
  ~EtcdServer();
  EtcdServer(const EtcdServer&) = delete;
  EtcdServer& operator=(const EtcdServer&) = delete;

  // Starts etcd (again, after Stop or Kill: same ports and data) and waits until it answers.
  Status Start();
  void Stop();  // SIGTERM, waits
  void Kill();  // SIGKILL, waits
  void Pause();
  void Resume();
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  std::string endpoint() const {
    return (tls_ ? "https://127.0.0.1:" : "http://127.0.0.1:") + std::to_string(client_port_);
  }
  // Before the first Start: makes a CA, a server certificate for 127.0.0.1 and a client
  // certificate (openssl(1)), and starts etcd with TLS and --client-cert-auth.
  Status EnableTls();
  // What a client needs for a TLS etcd: the CA, the client certificate and key.
  const etcd::TlsOptions& client_tls() const { return client_tls_; }
  // Another CA's files, which etcd does not trust (and which do not verify etcd).
  const etcd::TlsOptions& stranger_tls() const { return stranger_tls_; }
  // A client of this server with the default options.
  Result<std::unique_ptr<etcd::Client>> NewClient() const;
  const std::string& data_dir() const { return dir_; }
  // The last lines of etcd's log, for a failing test's message.
  std::string LogTail() const;

 private:
  Status StartOnce();
  void Wait();
  std::string dir_;
  int client_port_ = 0;
  int peer_port_ = 0;
  pid_t pid_ = -1;
  bool started_ = false;  // the ports are fixed after the first start
  bool tls_ = false;
  etcd::TlsOptions client_tls_, stranger_tls_;
};

// A TCP port on 127.0.0.1 that a server started next can bind: random, below the ephemeral
// range (see the definition for why).
int FreeLoopbackPort();

}  // namespace kvfs::testing
