// RDMA connections over librdmacm: RC queue pairs that carry one-sided RDMA READs of chunk data.
// Control messages (requests, grants, releases) stay on the authenticated TCP connection; the
// QP only moves bytes, so it needs no receive buffers and no message protocol of its own.
//
//   RdmaEndpoint  (client) resolve addr -> resolve route -> create PD/CQ/QP -> connect; then
//                 Read() posts an RDMA READ of a granted remote buffer and polls its completion
//                 until a deadline.
//   RdmaListener  (server) listens, accepts each connect request with a QP on the server's
//                 protection domain (the one export buffers are registered in), so peers can
//                 READ them.
// Every step is bounded by a deadline and tracked by RdmaConnectionState.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvfs/status.h"
#include "kvfs/wire.h"
#include "rdma_connection_state.h"
#include "rdma_registration.h"
#include "tcp_socket.h"

struct rdma_event_channel;
struct rdma_cm_id;
struct ibv_cq;
struct ibv_pd;
struct ibv_context;

namespace kvfs {

class RdmaEndpoint {
 public:
  static Result<std::unique_ptr<RdmaEndpoint>> Connect(const std::string& host, uint16_t port,
                                                       Deadline deadline);
  ~RdmaEndpoint();
  struct ibv_pd* pd() const {
    return pd_;
  }
  RdmaState state() const;
  // READs remote.[addr, addr + length) into local_addr (inside the registered `local`).
  // Serialised per endpoint; a failed or timed-out READ fails the endpoint.
  Status Read(const MemoryRegion& local, void* local_addr, const wire::RemoteBuffer& remote,
              size_t length, Deadline deadline);

 private:
  RdmaEndpoint() = default;
  Status WaitEvent(RdmaEvent want, Deadline deadline);

  struct rdma_event_channel* channel_ = nullptr;
  struct rdma_cm_id* id_ = nullptr;
  struct ibv_pd* pd_ = nullptr;
  struct ibv_cq* cq_ = nullptr;
  mutable std::mutex mu_;
  RdmaConnectionState state_;
  uint64_t next_wr_id_ = 1;
};

class RdmaListener {
 public:
  static Result<std::unique_ptr<RdmaListener>> Start(const std::string& host, uint16_t port);
  ~RdmaListener();
  struct ibv_pd* pd() const {
    return pd_;
  }
  size_t connections() const;

 private:
  RdmaListener() = default;
  void EventLoop();
  struct Peer {
    struct rdma_cm_id* id = nullptr;
    struct ibv_cq* cq = nullptr;
    RdmaConnectionState state;
  };
  void DropPeer(struct rdma_cm_id* id);

  struct rdma_event_channel* channel_ = nullptr;
  struct rdma_cm_id* listen_id_ = nullptr;
  struct ibv_context* context_ = nullptr;
  struct ibv_pd* pd_ = nullptr;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Peer>> peers_;
};

}  // namespace kvfs
