// PeerClient over RDMA: the TCP client carries every request and answer (and authenticates);
// GET data moves by one-sided RDMA READ. A GET asks the server for a grant (kFlagRdmaData),
// READs the granted buffer straight into the caller's buffer (registered through a cache, so a
// reused buffer costs no new registration), then releases the grant.
//
// When the RDMA path is unavailable (connect failed, the server has no RDMA, its export budget
// is full) the GET goes over TCP instead; a broken RDMA connection is re-tried at most once a
// second.
#pragma once

#include <memory>
#include <mutex>

#include "kvfs/transport.h"
#include "rdma_endpoint.h"
#include "rdma_registration.h"
#include "tcp_client.h"

namespace kvfs {

class RdmaPeerClient : public PeerClient {
 public:
  RdmaPeerClient(PeerAddress peer, ClientOptions options);
  ~RdmaPeerClient() override;

  const PeerAddress& address() const override { return tcp_.address(); }
  Status Ping(const CallOptions& call) override { return tcp_.Ping(call); }
  Result<wire::GetReply> Get(const wire::GetRequest& req, std::span<uint8_t> out,
                             const CallOptions& call) override;
  Result<wire::PutReply> Put(const wire::PutRequest& req, std::span<const uint8_t> data,
                             const CallOptions& call) override {
    return tcp_.Put(req, data, call);
  }
  Result<StoreStats> Stats(const CallOptions& call) override { return tcp_.Stats(call); }

 private:
  // The endpoint and the registrations made in its protection domain live and die together;
  // calls in flight hold a reference while a reconnect replaces it.
  struct DataPath {
    std::unique_ptr<RdmaEndpoint> endpoint;
    std::unique_ptr<VerbsRegistrar> registrar;
    std::unique_ptr<RegistrationCache> cache;
    ~DataPath() {
      cache.reset();  // deregister before the PD goes away with the endpoint
    }
  };
  std::shared_ptr<DataPath> EnsureDataPath(Deadline deadline);
  Result<wire::GetReply> RdmaGet(DataPath& path, const wire::GetRequest& req,
                                 std::span<uint8_t> out, Deadline deadline);

  const ClientOptions options_;
  TcpPeerClient tcp_;
  std::mutex mu_;
  std::shared_ptr<DataPath> path_;
  Clock::time_point retry_after_{};
};

}  // namespace kvfs
