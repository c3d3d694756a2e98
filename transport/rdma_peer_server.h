// PeerServer with RDMA data: the TCP server handles every request; an RdmaListener accepts QPs
// on the server's protection domain and an RdmaBufferExporter hands out registered buffers in
// that domain, so a GET with kFlagRdmaData is answered with a grant the client READs.
#pragma once

#include <memory>

#include "kvfs/transport.h"
#include "rdma_buffer_exporter.h"
#include "rdma_endpoint.h"
#include "tcp_server.h"

namespace kvfs {

class RdmaPeerServer : public PeerServer {
 public:
  static Result<std::unique_ptr<PeerServer>> Start(const ServerOptions& options,
                                                   RequestHandler* handler);
  ~RdmaPeerServer() override { Stop(); }
  uint16_t port() const override { return tcp_->port(); }
  void Stop() override {
    if (tcp_) tcp_->Stop();  // no more grants after this
  }

 private:
  // Destruction order matters: TCP server, then exporter (deregisters), then the listener (PD).
  std::unique_ptr<RdmaListener> listener_;
  std::unique_ptr<VerbsRegistrar> registrar_;
  std::unique_ptr<RdmaBufferExporter> exporter_;
  std::unique_ptr<TcpPeerServer> tcp_;
};

}  // namespace kvfs
