#include "rdma_endpoint.h"

#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <spdlog/spdlog.h>

#include <cstring>

namespace kvfs {
namespace {

constexpr int kResolveTimeoutMs = 2000;
constexpr int kQueueDepth = 16;  // outstanding READs per QP

Status Errno(const char* what) {
  const int err = errno ? errno : EIO;
  return Status::Error(err, std::string(what) + ": " + std::strerror(err));
}

int MsLeft(Deadline deadline) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return ms.count() <= 0 ? 0 : static_cast<int>(std::min<int64_t>(ms.count(), 1 << 30));
}

void SetNonBlocking(int fd) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

// An RC QP able to issue (client) or answer (server) RDMA READs.
Status CreateQp(struct rdma_cm_id* id, struct ibv_pd* pd, struct ibv_cq* cq) {
  struct ibv_qp_init_attr attr {};
  attr.send_cq = cq;
  attr.recv_cq = cq;
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = kQueueDepth;
  attr.cap.max_recv_wr = 1;
  attr.cap.max_send_sge = 1;
  attr.cap.max_recv_sge = 1;
  attr.sq_sig_all = 0;
  if (::rdma_create_qp(id, pd, &attr) != 0) return Errno("rdma_create_qp");
  return Status::Ok();
}

}  // namespace

// ---- client ----

Status RdmaEndpoint::WaitEvent(RdmaEvent want, Deadline deadline) {
  for (;;) {
    struct pollfd p {
      channel_->fd, POLLIN, 0
    };
    const int ms = MsLeft(deadline);
    if (ms == 0) return state_.On(RdmaEvent::kTimeout);
    int r = ::poll(&p, 1, ms);
    if (r < 0 && errno != EINTR) return Errno("poll rdma event channel");
    if (r <= 0) continue;
    struct rdma_cm_event* ev = nullptr;
    if (::rdma_get_cm_event(channel_, &ev) != 0) {
      if (errno == EAGAIN) continue;
      return Errno("rdma_get_cm_event");
    }
    const int type = ev->event;
    ::rdma_ack_cm_event(ev);
    auto event = RdmaEventFromCm(type);
    if (!event) continue;
    KVFS_RETURN_IF_ERROR(state_.On(*event));
    if (*event == want) return Status::Ok();
  }
}

Result<std::unique_ptr<RdmaEndpoint>> RdmaEndpoint::Connect(const std::string& host, uint16_t port,
                                                            Deadline deadline) {
  std::unique_ptr<RdmaEndpoint> ep(new RdmaEndpoint());
  ep->channel_ = ::rdma_create_event_channel();
  if (ep->channel_ == nullptr) return Errno("rdma_create_event_channel");
  SetNonBlocking(ep->channel_->fd);
  if (::rdma_create_id(ep->channel_, &ep->id_, nullptr, RDMA_PS_TCP) != 0) {
    return Errno("rdma_create_id");
  }
  struct addrinfo hints {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  struct addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &res) != 0 || res == nullptr) {
    return Status::Error(EHOSTUNREACH, "cannot resolve " + host);
  }
  KVFS_RETURN_IF_ERROR(ep->state_.On(RdmaEvent::kStart));
  int r = ::rdma_resolve_addr(ep->id_, nullptr, res->ai_addr, kResolveTimeoutMs);
  ::freeaddrinfo(res);
  if (r != 0) return Errno("rdma_resolve_addr");
  KVFS_RETURN_IF_ERROR(ep->WaitEvent(RdmaEvent::kAddrResolved, deadline));
  if (::rdma_resolve_route(ep->id_, kResolveTimeoutMs) != 0) return Errno("rdma_resolve_route");
  KVFS_RETURN_IF_ERROR(ep->WaitEvent(RdmaEvent::kRouteResolved, deadline));

  ep->pd_ = ::ibv_alloc_pd(ep->id_->verbs);
  if (ep->pd_ == nullptr) return Errno("ibv_alloc_pd");
  ep->cq_ = ::ibv_create_cq(ep->id_->verbs, kQueueDepth * 2, nullptr, nullptr, 0);
  if (ep->cq_ == nullptr) return Errno("ibv_create_cq");
  KVFS_RETURN_IF_ERROR(CreateQp(ep->id_, ep->pd_, ep->cq_));

  struct rdma_conn_param param {};
  param.initiator_depth = kQueueDepth;
  param.responder_resources = kQueueDepth;
  param.retry_count = 7;
  param.rnr_retry_count = 7;
  if (::rdma_connect(ep->id_, &param) != 0) return Errno("rdma_connect");
  KVFS_RETURN_IF_ERROR(ep->WaitEvent(RdmaEvent::kEstablished, deadline));
  spdlog::info("rdma: connected to {}:{}", host, port);
  return ep;
}

RdmaEndpoint::~RdmaEndpoint() {
  if (id_ != nullptr) {
    if (state_.connected()) {
      (void)state_.On(RdmaEvent::kClose);
      ::rdma_disconnect(id_);
    }
    if (id_->qp != nullptr) ::rdma_destroy_qp(id_);
  }
  if (cq_ != nullptr) ::ibv_destroy_cq(cq_);
  if (pd_ != nullptr) ::ibv_dealloc_pd(pd_);
  if (id_ != nullptr) ::rdma_destroy_id(id_);
  if (channel_ != nullptr) ::rdma_destroy_event_channel(channel_);
}

RdmaState RdmaEndpoint::state() const {
  std::lock_guard lock(mu_);
  return state_.state();
}

Status RdmaEndpoint::Read(const MemoryRegion& local, void* local_addr,
                          const wire::RemoteBuffer& remote, size_t length, Deadline deadline) {
  std::lock_guard lock(mu_);
  if (!state_.connected()) return Status::Error(ENOTCONN, "rdma endpoint not connected");
  if (length > remote.length || !local.Contains(reinterpret_cast<uint64_t>(local_addr), length)) {
    return Status::Invalid("rdma read outside its buffers");
  }
  struct ibv_sge sge {};
  sge.addr = reinterpret_cast<uint64_t>(local_addr);
  sge.length = static_cast<uint32_t>(length);
  sge.lkey = local.lkey;
  struct ibv_send_wr wr {};
  struct ibv_send_wr* bad = nullptr;
  wr.wr_id = next_wr_id_++;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = remote.addr;
  wr.wr.rdma.rkey = remote.rkey;
  if (int err = ::ibv_post_send(id_->qp, &wr, &bad); err != 0) {
    return Status::Error(err, std::string("ibv_post_send: ") + std::strerror(err));
  }
  // Busy-poll the CQ (a READ of a few MiB completes in around a millisecond), yielding between
  // polls; on timeout the QP may still complete the READ later, so the endpoint is failed.
  for (;;) {
    struct ibv_wc wc {};
    int n = ::ibv_poll_cq(cq_, 1, &wc);
    if (n < 0) return Status::IoError("ibv_poll_cq failed");
    if (n == 1) {
      if (wc.wr_id != wr.wr_id) continue;  // a late completion of an abandoned READ
      if (wc.status != IBV_WC_SUCCESS) {
        (void)state_.On(RdmaEvent::kConnectError);
        return Status::IoError(std::string("rdma read failed: ") + ::ibv_wc_status_str(wc.status));
      }
      return Status::Ok();
    }
    if (Clock::now() >= deadline) return state_.On(RdmaEvent::kTimeout);
    std::this_thread::yield();
  }
}

// ---- server ----

Result<std::unique_ptr<RdmaListener>> RdmaListener::Start(const std::string& host, uint16_t port) {
  std::unique_ptr<RdmaListener> l(new RdmaListener());
  int n = 0;
  struct ibv_context** contexts = ::rdma_get_devices(&n);
  if (contexts == nullptr || n == 0) {
    if (contexts != nullptr) ::rdma_free_devices(contexts);
    return Status::Error(ENODEV, "no RDMA device");
  }
  // One protection domain for every peer QP and every export buffer: a READ is allowed only
  // when the QP and the memory region share a PD. (With several devices we use the first.)
  l->context_ = contexts[0];
  ::rdma_free_devices(contexts);
  l->pd_ = ::ibv_alloc_pd(l->context_);
  if (l->pd_ == nullptr) return Errno("ibv_alloc_pd");
  l->channel_ = ::rdma_create_event_channel();
  if (l->channel_ == nullptr) return Errno("rdma_create_event_channel");
  SetNonBlocking(l->channel_->fd);
  if (::rdma_create_id(l->channel_, &l->listen_id_, nullptr, RDMA_PS_TCP) != 0) {
    return Errno("rdma_create_id");
  }
  struct addrinfo hints {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_flags = AI_PASSIVE;
  struct addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (::getaddrinfo(host.c_str(), service.c_str(), &hints, &res) != 0 || res == nullptr) {
    return Status::Invalid("cannot resolve " + host);
  }
  int r = ::rdma_bind_addr(l->listen_id_, res->ai_addr);
  ::freeaddrinfo(res);
  if (r != 0) return Errno("rdma_bind_addr");
  if (::rdma_listen(l->listen_id_, 64) != 0) return Errno("rdma_listen");
  l->thread_ = std::thread([p = l.get()] { p->EventLoop(); });
  spdlog::info("rdma: listening on {}:{}", host, port);
  return l;
}

RdmaListener::~RdmaListener() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard lock(mu_);
    for (auto& p : peers_) {
      if (p->state.connected()) ::rdma_disconnect(p->id);
      if (p->id->qp != nullptr) ::rdma_destroy_qp(p->id);
      if (p->cq != nullptr) ::ibv_destroy_cq(p->cq);
      ::rdma_destroy_id(p->id);
    }
    peers_.clear();
  }
  if (listen_id_ != nullptr) ::rdma_destroy_id(listen_id_);
  if (channel_ != nullptr) ::rdma_destroy_event_channel(channel_);
  if (pd_ != nullptr) ::ibv_dealloc_pd(pd_);
}

size_t RdmaListener::connections() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (auto& p : peers_) n += p->state.connected() ? 1 : 0;
  return n;
}

void RdmaListener::DropPeer(struct rdma_cm_id* id) {
  std::lock_guard lock(mu_);
  for (auto it = peers_.begin(); it != peers_.end(); ++it) {
    if ((*it)->id != id) continue;
    if (id->qp != nullptr) ::rdma_destroy_qp(id);
    if ((*it)->cq != nullptr) ::ibv_destroy_cq((*it)->cq);
    ::rdma_destroy_id(id);
    peers_.erase(it);
    return;
  }
}

void RdmaListener::EventLoop() {
  while (!stop_) {
    struct pollfd p {
      channel_->fd, POLLIN, 0
    };
    if (::poll(&p, 1, 200) <= 0) continue;
    struct rdma_cm_event* ev = nullptr;
    if (::rdma_get_cm_event(channel_, &ev) != 0) continue;
    struct rdma_cm_id* id = ev->id;
    const int type = ev->event;
    struct rdma_conn_param req_param = ev->param.conn;
    ::rdma_ack_cm_event(ev);
    auto event = RdmaEventFromCm(type);
    if (!event) continue;
    if (*event == RdmaEvent::kConnectRequest) {
      auto peer = std::make_unique<Peer>();
      peer->id = id;
      (void)peer->state.On(RdmaEvent::kConnectRequest);
      peer->cq = ::ibv_create_cq(id->verbs, kQueueDepth * 2, nullptr, nullptr, 0);
      Status st = peer->cq ? CreateQp(id, pd_, peer->cq) : Errno("ibv_create_cq");
      struct rdma_conn_param param {};
      param.responder_resources = std::min<uint8_t>(req_param.initiator_depth, kQueueDepth);
      param.initiator_depth = std::min<uint8_t>(req_param.responder_resources, kQueueDepth);
      if (st.ok() && ::rdma_accept(id, &param) != 0) st = Errno("rdma_accept");
      if (!st.ok()) {
        spdlog::warn("rdma: refusing a connection: {}", st.ToString());
        ::rdma_reject(id, nullptr, 0);
        if (id->qp != nullptr) ::rdma_destroy_qp(id);
        if (peer->cq != nullptr) ::ibv_destroy_cq(peer->cq);
        ::rdma_destroy_id(id);
        continue;
      }
      std::lock_guard lock(mu_);
      peers_.push_back(std::move(peer));
      continue;
    }
    bool drop = false;
    {
      std::lock_guard lock(mu_);
      for (auto& peer : peers_) {
        if (peer->id != id) continue;
        Status st = peer->state.On(*event);
        if (!st.ok()) spdlog::warn("rdma: {}", st.ToString());
        drop = peer->state.terminal();
      }
    }
    if (drop) DropPeer(id);
  }
}

}  // namespace kvfs
