#include "rdma_peer_client.h"

#include <spdlog/spdlog.h>

namespace kvfs {

using wire::MsgType;

RdmaPeerClient::RdmaPeerClient(PeerAddress peer, ClientOptions options)
    : options_(options), tcp_(std::move(peer), std::move(options)) {}

RdmaPeerClient::~RdmaPeerClient() = default;

std::shared_ptr<RdmaPeerClient::DataPath> RdmaPeerClient::EnsureDataPath(Deadline deadline) {
  std::lock_guard lock(mu_);
  if (path_ && path_->endpoint->state() == RdmaState::kConnected) return path_;
  path_.reset();
  if (Clock::now() < retry_after_) return nullptr;
  const PeerAddress& peer = tcp_.address();
  const uint16_t port = options_.rdma_port != 0 ? options_.rdma_port : peer.port;
  auto ep = RdmaEndpoint::Connect(peer.host, port,
                                  std::min(deadline, Clock::now() + options_.connect_timeout));
  if (!ep.ok()) {
    spdlog::warn("rdma: cannot connect to {}:{} ({}); GETs use TCP", peer.host, port,
                 ep.status().ToString());
    retry_after_ = Clock::now() + std::chrono::seconds(1);
    return nullptr;
  }
  auto path = std::make_shared<DataPath>();
  path->endpoint = std::move(ep).value();
  path->registrar = std::make_unique<VerbsRegistrar>(path->endpoint->pd());
  path->cache =
      std::make_unique<RegistrationCache>(path->registrar.get(), options_.rdma_register_bytes);
  path_ = path;
  return path_;
}

Result<wire::GetReply> RdmaPeerClient::RdmaGet(DataPath& path, const wire::GetRequest& req,
                                               std::span<uint8_t> out, Deadline deadline) {
  KVFS_ASSIGN_OR_RETURN(MemoryRegion region, path.cache->Pin(out.data(), req.length));
  const uint32_t flags =
      wire::kFlagRdmaData |
      (options_.data_checksums ? static_cast<uint32_t>(wire::kFlagDataDigests) : 0u);
  auto frame = tcp_.Call(MsgType::kGet, flags, wire::Encode(req), {}, nullptr, deadline);
  if (!frame.ok()) {
    path.cache->Unpin(region);
    return frame.status();
  }
  wire::GetReply reply;
  Status st = wire::Decode(wire::AsBytes(frame->meta), &reply);
  if (st.ok() && (!reply.remote || reply.length > req.length)) {
    st = Status::Error(EPROTO, "GET grant does not match the request");
  }
  if (st.ok() && reply.length > 0) {
    st = path.endpoint->Read(region, out.data(), *reply.remote, reply.length, deadline);
  }
  // The serving engine's checksums came with the grant: checked here, once.
  if (st.ok()) st = CheckDataDigests(frame->header.flags, flags, reply, out);
  path.cache->Unpin(region);
  if (reply.remote) {
    // Best effort: an unreleased grant expires on the server by itself.
    auto rel =
        tcp_.Call(MsgType::kRdmaRelease, 0, wire::Encode(wire::RdmaRelease{reply.remote->token}),
                  {}, nullptr, Clock::now() + std::chrono::seconds(1));
    if (!rel.ok()) spdlog::debug("rdma: release failed: {}", rel.status().ToString());
  }
  if (!st.ok()) return st;
  reply.remote.reset();
  reply.digests.clear();
  return reply;
}

Result<wire::GetReply> RdmaPeerClient::Get(const wire::GetRequest& req, std::span<uint8_t> out,
                                           const CallOptions& call) {
  if (out.size() < req.length) return Status::Invalid("GET buffer smaller than the range");
  const Deadline deadline = tcp_.DeadlineFor(call);
  std::shared_ptr<DataPath> path = req.length > 0 ? EnsureDataPath(deadline) : nullptr;
  if (path) {
    auto r = RdmaGet(*path, req, out, deadline);
    // Only "RDMA cannot serve this" (or a broken QP) falls back to TCP; a real answer from the
    // server (ENOENT, ESTALE...) is final.
    // A digest mismatch is read again over TCP, whose GET asks the server to check its copy
    // should the bytes not match again.
    const bool rdma_broke = path->endpoint->state() != RdmaState::kConnected;
    const int err = r.ok() ? 0 : r.status().err();
    if (r.ok() || (!rdma_broke && err != EOPNOTSUPP && err != ENOMEM && err != kDigestMismatch)) {
      return r;
    }
  }
  return tcp_.Get(req, out, call);
}

}  // namespace kvfs
