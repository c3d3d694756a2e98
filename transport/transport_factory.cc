// The transport factory: picks TCP or RDMA per peer from the configured kind.
#include <infiniband/verbs.h>
#include <spdlog/spdlog.h>

#include <mutex>

#include "kvfs/transport.h"
#include "rdma_peer_client.h"
#include "rdma_peer_server.h"
#include "tcp_client.h"
#include "tcp_server.h"

namespace kvfs {
namespace {

// Resolves kAuto once per process and says so once in the log.
Result<TransportKind> Resolve(TransportKind kind) {
  if (kind == TransportKind::kTcp) return kind;
  const bool rdma = RdmaDeviceAvailable();
  if (kind == TransportKind::kRdma) {
    if (!rdma)
      return Status::Error(ENODEV, "transport = \"rdma\" but this host has no RDMA device");
    return kind;
  }
  static std::once_flag logged;
  std::call_once(logged, [rdma] {
    spdlog::info("transport = \"auto\": {}", rdma ? "RDMA device found, using RDMA for chunk data"
                                                  : "no RDMA device, using TCP");
  });
  return rdma ? TransportKind::kRdma : TransportKind::kTcp;
}

}  // namespace

Result<TransportKind> ParseTransportKind(std::string_view text) {
  if (text == "tcp") return TransportKind::kTcp;
  if (text == "rdma") return TransportKind::kRdma;
  if (text == "auto") return TransportKind::kAuto;
  return Status::Invalid("unknown transport '" + std::string(text) + "' (use tcp, rdma or auto)");
}

bool RdmaDeviceAvailable() {
  static const bool available = [] {
    int n = 0;
    struct ibv_device** list = ::ibv_get_device_list(&n);
    if (list == nullptr) return false;
    ::ibv_free_device_list(list);
    return n > 0;
  }();
  return available;
}

Result<std::unique_ptr<PeerClient>> MakePeerClient(const PeerAddress& peer,
                                                   const ClientOptions& options) {
  if (options.secret.empty()) return Status::Error(EACCES, "no shared secret configured");
  if (peer.host.empty() || peer.port == 0) {
    return Status::Invalid("peer address needs a host and a port: " + peer.ToString());
  }
  if (options.max_frame < 64 * 1024) return Status::Invalid("max_frame below 64 KiB");
  KVFS_ASSIGN_OR_RETURN(TransportKind kind, Resolve(options.kind));
  std::unique_ptr<PeerClient> client;
  if (kind == TransportKind::kRdma) {
    client = std::make_unique<RdmaPeerClient>(peer, options);
  } else {
    client = std::make_unique<TcpPeerClient>(peer, options);
  }
  return client;
}

Result<std::unique_ptr<PeerServer>> StartPeerServer(const ServerOptions& options,
                                                    RequestHandler* handler) {
  KVFS_ASSIGN_OR_RETURN(TransportKind kind, Resolve(options.kind));
  if (kind == TransportKind::kRdma) return RdmaPeerServer::Start(options, handler);
  KVFS_ASSIGN_OR_RETURN(std::unique_ptr<TcpPeerServer> s, TcpPeerServer::Start(options, handler));
  return std::unique_ptr<PeerServer>(std::move(s));
}

Result<std::unique_ptr<PeerServer>> RdmaPeerServer::Start(const ServerOptions& options,
                                                          RequestHandler* handler) {
  std::unique_ptr<RdmaPeerServer> s(new RdmaPeerServer());
  // TCP first: with port 0 it picks the port the RDMA listener then shares. Until the exporter
  // is attached, RDMA GETs are answered EOPNOTSUPP and clients use TCP.
  KVFS_ASSIGN_OR_RETURN(s->tcp_, TcpPeerServer::Start(options, handler));
  const uint16_t rdma_port = options.rdma_port != 0 ? options.rdma_port : s->tcp_->port();
  KVFS_ASSIGN_OR_RETURN(s->listener_, RdmaListener::Start(options.host, rdma_port));
  s->registrar_ = std::make_unique<VerbsRegistrar>(s->listener_->pd());
  s->exporter_ =
      std::make_unique<RdmaBufferExporter>(s->registrar_.get(), options.rdma_export_bytes);
  s->tcp_->SetExporter(s->exporter_.get());
  return std::unique_ptr<PeerServer>(std::move(s));
}

}  // namespace kvfs
