// kvfs: the daemon. Parses the options, daemonizes (unless -f), opens the engine, mounts, and
// serves until unmounted or signalled; then it checkpoints the engine and exits 0.
//
// Without -f it forks before any thread exists: the child opens the engine and mounts, then
// tells the parent "ready" (or the error) through a pipe, so `kvfs MOUNTPOINT` returns only once
// the mount works, with exit status 0, or prints why it failed and exits 1.
#include <fcntl.h>
#include <signal.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "cluster_node.h"
#include "control.h"
#include "fuse_ops.h"
#include "kvfs/local_engine.h"
#include "kvfs/size.h"
#include "kvfs/version.h"
#include "memory_store.h"
#include "metrics_server.h"
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
  void Ready() {
    if (fd_ < 0) return;
    (void)!write(fd_, "ready", 5);
    close(fd_);
    fd_ = -1;
  }

 private:
  int fd_;
};

// Parent side of the daemonizing fork: waits for "ready" or an error message.
int WaitForChild(int fd, pid_t child) {
  std::string msg;
  char buf[512];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) msg.append(buf, static_cast<size_t>(n));
  close(fd);
  if (msg == "ready") return 0;
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

Result<std::unique_ptr<ChunkStore>> OpenStore(const MountOptions& o) {
  if (o.store == "memory") return std::unique_ptr<ChunkStore>(std::make_unique<MemoryStore>());
  EngineOptions e;
  e.data_dir = o.data_dir;
  e.devices = o.devices;
  e.capacity = o.capacity;
  e.durability = o.durability;
  e.compression = o.compression;
  e.eviction = o.eviction;
  e.high_watermark = o.high_watermark;
  e.low_watermark = o.low_watermark;
  KVFS_ASSIGN_OR_RETURN(auto engine, LocalEngine::Open(e));
  return std::unique_ptr<ChunkStore>(std::move(engine));
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

  auto store = OpenStore(o);
  if (!store.ok()) return reporter.Fail("cannot open the engine: " + store.status().ToString());
  // Cluster mode (--listen or peers): the fs runs over a ClusterStore wrapping the engine.
  std::unique_ptr<ClusterNode> cluster;
  ChunkStore* fs_store = store->get();
  if (o.cluster.enabled()) {
    auto node = ClusterNode::Start(o, store->get());
    if (!node.ok())
      return reporter.Fail("cannot start the cluster node: " + node.status().ToString());
    cluster = std::move(*node);
    fs_store = cluster->store();
  }
  Notifier notifier;
  Namespace ns(fs_store, &notifier);
  if (cluster) cluster->BeginLoad();
  if (Status st = ns.Load(); !st.ok()) return reporter.Fail("cannot load: " + st.ToString());
  if (cluster) cluster->Attach(&ns);
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
  if (cluster) {
    control.SetClusterView(
        {[&cluster] { return cluster->NodesJson(); },
         [&cluster, &ns](uint64_t ino) { return cluster->LocationJson(ino, &ns); }});
  }
  FsContext ctx{&ns, &control, fs_store};

  auto session = Session::Mount(o.mountpoint, o.fuse_options, &ctx);
  if (!session.ok()) return reporter.Fail(session.status().message());
  notifier.Start((*session)->raw());
  spdlog::info("kvfs: mounted on {}", o.mountpoint);
  if (metrics) {  // stopped below, before anything it reads goes away
    Status st = metrics->Start([&control] { return PrometheusText(control.StatusJson()); });
    if (!st.ok()) return reporter.Fail("--metrics: " + st.ToString());
  }
  reporter.Ready();

  (*session)->TuneReadaheadAfterInit(1024);  // before the unblock: it must not take signals
  pthread_sigmask(SIG_UNBLOCK, &stop_signals, nullptr);
  unsigned threads = std::max(8u, 4 * std::max(1u, std::thread::hardware_concurrency()));
  int rc = (*session)->Loop(threads);
  spdlog::info("kvfs: loop ended ({}), unmounting", rc);
  if (metrics) metrics->Stop();  // scrapes read the namespace and the store
  notifier.Stop();
  session->reset();  // unmount and destroy the session before the namespace goes away
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
  if (cluster) cluster->Shutdown();  // stops serving peers, writes the namespace snapshot
  cluster.reset();                   // before the engine it wraps
  store->reset();
  spdlog::info("kvfs: stopped cleanly");
  spdlog::shutdown();
  return exit_code;
}

}  // namespace
}  // namespace kvfs::fs

int main(int argc, char** argv) {
  using namespace kvfs::fs;
  ParsedCommandLine parsed = ParseMountOptions(argc, argv);
  if (!parsed.options) {
    std::fputs(parsed.message.c_str(), parsed.exit_code == 0 ? stdout : stderr);
    return parsed.exit_code;
  }
  MountOptions options = std::move(*parsed.options);
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
