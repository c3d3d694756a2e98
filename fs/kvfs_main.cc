// kvfs: the daemon. Parses the options, daemonizes (unless -f), opens the engine, mounts, and
// serves until unmounted or signalled; then it checkpoints the engine and exits 0.
//
// Without -f it forks before any thread exists: the child opens the engine and mounts, then
// tells the parent "ready" (or the error) through a pipe, so `kvfs MOUNTPOINT` returns only once
// the mount works, with exit status 0, or prints why it failed and exits 1.
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <signal.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "config_file.h"
#include "connection_watchdog.h"
#include "control.h"
#include "fuse_ops.h"
#include "kvfs/local_engine.h"
#include "kvfs/size.h"
#include "kvfs/store.h"
#include "kvfs/transport.h"
#include "kvfs/version.h"
#include "metrics_server.h"
#include "mount_info.h"
#include "mount_options.h"
#include "namespace.h"
#include "notifier.h"
#include "session.h"
#include "store_events.h"

namespace kvfs::fs {
namespace {

// Reports the outcome of the start to whoever waits: the parent through the pipe, or stderr.
class StartReporter {
 public:
  explicit StartReporter(int fd) : fd_(fd) {}
  int Fail(const std::string& message) {
    spdlog::error("{}", message);
    if (fd_ >= 0) {
      std::string m = "kvfs: " + message + "\n";
      (void)!write(fd_, m.data(), m.size());
      close(fd_);
      fd_ = -1;
    } else {
      std::fprintf(stderr, "kvfs: %s\n", message.c_str());
    }
    return 1;
  }
  // A line the launcher prints when the start succeeds (logged as a warning too).
  void Note(const std::string& message) {
    spdlog::warn("{}", message);  // in the foreground, the log is stderr
    if (fd_ >= 0) notes_ += "kvfs: " + message + "\n";
  }
  void Ready() {
    if (fd_ < 0) return;
    const std::string m = notes_ + "ready";
    (void)!write(fd_, m.data(), m.size());
    close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
  std::string notes_;  // Note()s for the launcher, sent with "ready"
};

// Parent side of the daemonizing fork: waits for "ready" (after the daemon's notes) or an error
// message.
int WaitForChild(int fd, pid_t child) {
  std::string msg;
  char buf[512];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(n));
  close(fd);
  if (msg.ends_with("ready")) {
    std::fputs(msg.substr(0, msg.size() - 5).c_str(), stderr);
    return 0;
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (msg.empty()) msg = "kvfs: the daemon exited during start\n";
  std::fputs(msg.c_str(), stderr);
  return 1;
}

void SetupLogging(const MountOptions& o) {
  std::shared_ptr<spdlog::logger> logger;
  if (o.foreground) {
    logger = spdlog::stderr_color_mt("kvfs");
  } else {
    try {
      logger = spdlog::basic_logger_mt("kvfs", o.data_dir + "/kvfs.log");
    } catch (const spdlog::spdlog_ex&) {
      logger = spdlog::stderr_color_mt("kvfs");
    }
  }
  logger->set_level(spdlog::level::from_str(o.log_level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

// What OpenStore needs, from the mount options (already validated).
Result<StoreOptions> StoreOptionsFor(const MountOptions& o) {
  StoreOptions so;
  so.kind = o.store;
  EngineOptions& e = so.engine;
  e.data_dir = o.data_dir;
  e.devices = o.devices;
  e.capacity = o.capacity;
  e.durability = o.durability;
  e.compression = o.compression;
  e.eviction = o.eviction;
  e.high_watermark = o.high_watermark;
  e.low_watermark = o.low_watermark;
  const ClusterSettings& c = o.cluster;
  so.cluster_enabled = c.enabled();
  if (!so.cluster_enabled) return so;
  ClusterOptions& co = so.cluster;
  co.node_id = c.node_id;
  KVFS_ASSIGN_OR_RETURN(PeerAddress listen, ParsePeerAddress(c.listen));
  co.listen_host = listen.host;
  co.listen_port = listen.port;
  co.advertise = c.advertise;
  co.etcd.endpoints = c.etcd;
  co.etcd.api = c.etcd_api == "json" ? etcd::ClientOptions::Api::kJsonGateway
                                     : etcd::ClientOptions::Api::kGrpc;
  co.etcd.tls.ca_file = c.etcd_ca;
  co.etcd.tls.cert_file = c.etcd_cert;
  co.etcd.tls.key_file = c.etcd_key;
  co.etcd_prefix = c.etcd_prefix;
  co.replicas = c.replicas;
  KVFS_ASSIGN_OR_RETURN(co.secret, SharedSecret::FromFile(c.secret_file));
  KVFS_ASSIGN_OR_RETURN(TransportKind kind, ParseTransportKind(c.transport));
  if (kind == TransportKind::kAuto && !RdmaDeviceAvailable()) {
    spdlog::info("cluster: transport = auto and this host has no RDMA device: using TCP");
    kind = TransportKind::kTcp;
  }
  if (kind == TransportKind::kRdma && !RdmaDeviceAvailable())
    return Status::Error(ENODEV, "transport = rdma but this host has no RDMA device");
  co.transport = kind;
  co.request_timeout = std::chrono::milliseconds(c.request_timeout_ms);
  co.lease_ttl = std::chrono::seconds(c.lease_ttl_s);
  co.etcd_history = std::chrono::seconds(c.etcd_history_s);
  co.repair_bandwidth = c.repair_bandwidth;
  co.keep_local_copy = c.keep_local_copy;
  return so;
}

// Nodes started with another --replicas than this one are taken (a rolling change of R passes
// through that state), but the operator must hear of it: each node's publishes keep its own R.
void NoteOtherReplicas(const ClusterView& v, StartReporter* reporter) {
  std::map<uint32_t, std::string> others;  // R -> the nodes that keep it
  for (const NodeView& n : v.nodes) {
    if (n.state == "self" || n.replicas == 0 || n.replicas == v.replicas) continue;
    std::string& ids = others[n.replicas];
    ids += (ids.empty() ? "" : ", ") + std::to_string(n.id);
  }
  for (const auto& [r, ids] : others) {
    reporter->Note("--replicas is " + std::to_string(v.replicas) + " here but " +
                   std::to_string(r) + " on node" +
                   (ids.find(',') == std::string::npos ? " " : "s ") + ids +
                   ": what each node publishes keeps its own node's number of copies; " +
                   "start every node with the same --replicas");
  }
}

// `metrics` is the --metrics socket main() bound before forking (null when off).
int Run(MountOptions o, int ready_fd, std::unique_ptr<MetricsServer> metrics) {
  StartReporter reporter(ready_fd);
  SetupLogging(o);
  spdlog::info(
      "kvfs {} starting: mountpoint {}, data {}, capacity {}, durability {}, "
      "compression {}, store {}",
      KVFS_VERSION, o.mountpoint, o.data_dir, FormatSize(o.capacity), DurabilityName(o.durability),
      CompressionName(o.compression), o.store);

  // Signals wait for the FUSE loop: every thread started from here on (engine, notifier, FUSE
  // workers) inherits the block, so SIGTERM always reaches the main thread's loop.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto store_options = StoreOptionsFor(o);
  if (!store_options.ok()) return reporter.Fail(store_options.status().ToString());
  // A cluster node (--etcd) registers in etcd and serves peers before the namespace loads.
  auto store = OpenStore(*store_options);
  if (!store.ok()) {
    return reporter.Fail(std::string(o.cluster.enabled() ? "cannot join the cluster: "
                                                         : "cannot open the engine: ") +
                         store.status().ToString());
  }
  ChunkStore* fs_store = store->get();
  if (o.cluster.enabled()) NoteOtherReplicas(fs_store->Cluster(), &reporter);
  if (o.store == "local") {
    // A data directory keeps the devices it was made with: a --capacity changed since does not
    // resize them, and the operator who raised it must not believe it did.
    const uint64_t real = fs_store->Stats().capacity_bytes;
    const uint64_t slack = std::max<size_t>(o.devices.size(), 1) * (2u << 20);
    if (real + slack < o.capacity || o.capacity + slack < real) {
      const bool sized = DevicesHaveSizes(o);
      reporter.Note("capacity is " + FormatSize(real) + ", what " +
                    (o.devices.empty() ? o.data_dir + "/device0.kvfs holds"
                                       : std::string("the devices hold")) +
                    ", not the " + FormatSize(o.capacity) + " asked: " +
                    (sized ? "a device given a size holds that size"
                           : "kvfs does not resize the devices of an existing data directory"));
    }
  }
  Notifier notifier;
  Namespace ns(fs_store, &notifier);
  if (Status st = ns.Load(); !st.ok()) return reporter.Fail("cannot load: " + st.ToString());
  // Other nodes' changes flow from here on, starting right after what Load saw.
  StoreEvents events(&ns);
  fs_store->SetListener(&events);

  DaemonInfo info;
  info.mountpoint = o.mountpoint;
  info.data_dir = o.data_dir;
  for (const auto& d : o.devices) info.devices.push_back(d.path);
  if (info.devices.empty() && o.store == "local")
    info.devices.push_back(o.data_dir + "/device0.kvfs");
  info.durability = DurabilityName(o.durability);
  info.compression = CompressionName(o.compression);
  if (metrics) info.metrics = metrics->address();
  Control control(&ns, fs_store, info);
  FsContext ctx{&ns, &control, fs_store};

  auto session = Session::Mount(o.mountpoint, o.fuse_options, &ctx);
  if (!session.ok()) return reporter.Fail(session.status().message());
  notifier.Start((*session)->raw());
  spdlog::info("kvfs: mounted on {}", o.mountpoint);
  // Should this process die with a thread stuck in the kernel, the watchdog ends the mount's
  // connection (connection_watchdog.h). Stopped at a clean shutdown, or by its destructor.
  ConnectionWatchdog watchdog;
  if (auto conn = (*session)->connection()) {
    Status st = watchdog.Start(fuse_session_fd((*session)->raw()), *conn,
                               o.foreground ? "" : o.data_dir + "/kvfs.log", o.mountpoint);
    if (!st.ok()) spdlog::warn("kvfs: {}; a crash may leave the mount hanging", st.ToString());
  }
  if (metrics) {  // stopped below, before anything it reads goes away
    Status st = metrics->Start([&control] { return PrometheusText(control.StatusJson()); });
    if (!st.ok()) return reporter.Fail("--metrics: " + st.ToString());
  }
  // Ready once the kernel has the INIT answer, which the loop gives: kvfs returns with the
  // mount in use by no one (see TuneReadaheadAfterInit). Started before the unblock: the helper
  // thread must not take signals.
  (*session)->TuneReadaheadAfterInit(1024, [&reporter] { reporter.Ready(); });
  pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
  unsigned threads = std::max(8u, 4 * std::max(1u, std::thread::hardware_concurrency()));
  int rc = (*session)->Loop(threads);
  spdlog::info("kvfs: loop ended ({}), unmounting", rc);
  if (metrics) metrics->Stop();  // scrapes read the namespace and the store
  // A notification the kernel holds at this point waits on a request the ended loop will
  // never answer: past the grace, the connection is aborted to let it go, and the mount, which
  // libfuse leaves to an aborted connection, detached.
  notifier.Stop(std::chrono::seconds(2), [&] {
    auto conn = (*session)->connection();
    Status st = conn ? AbortFuseConnection(*conn) : Status::NotFound("connection unknown");
    if (st.ok()) st = DetachMount(o.mountpoint);
    if (!st.ok()) spdlog::error("kvfs: cannot abort the FUSE connection: {}", st.ToString());
  });
  session->reset();  // unmount and destroy the session before the namespace goes away
  watchdog.Stop();
  fs_store->SetListener(nullptr);

  int exit_code = 0;
  if (Status st = ns.PersistLazy(); !st.ok()) {
    spdlog::error("kvfs: persisting times failed: {}", st.ToString());
    exit_code = 1;
  }
  if (Status st = fs_store->Sync(); !st.ok()) {
    spdlog::error("kvfs: final sync failed: {}", st.ToString());
    exit_code = 1;
  }
  store->reset();  // a cluster node leaves the cluster here (its lease is revoked)
  spdlog::info("kvfs: stopped cleanly");
  spdlog::shutdown();
  return exit_code;
}

}  // namespace
}  // namespace kvfs::fs

int main(int argc, char** argv) {
  using namespace kvfs::fs;
  if (argc > 1 && std::string_view(argv[1]) == kWatchdogFlag)
    return ConnectionWatchdogMain(argc, argv);
  ParsedCommandLine parsed = ParseMountOptions(argc, argv);
  if (!parsed.options) {
    std::fputs(parsed.message.c_str(), parsed.exit_code == 0 ? stdout : stderr);
    return parsed.exit_code;
  }
  MountOptions options = std::move(*parsed.options);
  if (kvfs::Status st = Session::CheckOptions(options.fuse_options); !st.ok()) {
    std::fprintf(stderr, "kvfs: %s\n", st.message().c_str());
    return 2;
  }
  if (kvfs::Status st = ResolveDefaults(options); !st.ok()) {
    std::fprintf(stderr, "kvfs: %s\n", st.ToString().c_str());
    return 1;
  }
  // Bound here, before the fork, so a bad or busy address is the launcher's exit status 2.
  std::unique_ptr<MetricsServer> metrics;
  if (!options.metrics.empty()) {
    auto listening = MetricsServer::Listen(options.metrics);
    if (!listening.ok()) {
      std::fprintf(stderr, "kvfs: --metrics: %s\n", listening.status().message().c_str());
      return 2;
    }
    metrics = std::move(*listening);
  }
  if (options.foreground) {
    std::fprintf(stderr, "kvfs: data %s, capacity %s\n", options.data_dir.c_str(),
                 kvfs::FormatSize(options.capacity).c_str());
    return Run(std::move(options), -1, std::move(metrics));
  }
  std::printf("kvfs: data %s, capacity %s\n", options.data_dir.c_str(),
              kvfs::FormatSize(options.capacity).c_str());
  std::fflush(stdout);
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) {
    std::perror("kvfs: pipe");
    return 1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    std::perror("kvfs: fork");
    return 1;
  }
  if (pid > 0) {
    close(pipefd[1]);
    return WaitForChild(pipefd[0], pid);
  }
  close(pipefd[0]);
  setsid();
  if (chdir("/") != 0) {
  }
  int devnull = open("/dev/null", O_RDWR);
  if (devnull >= 0) {
    dup2(devnull, 0);
    dup2(devnull, 1);
    dup2(devnull, 2);
    if (devnull > 2) close(devnull);
  }
  return Run(std::move(options), pipefd[1], std::move(metrics));
}
