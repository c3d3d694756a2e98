#include "tcp_client.h"

#include <poll.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <system_error>
#include <thread>

#include "auth.h"

namespace kvfs {

using wire::MsgType;

namespace {
// Room left in a frame for a GET reply's meta; a read must leave it free.
constexpr uint32_t kFrameSlack = 4096;
// An idle connection has nothing to read: readable means the peer closed it (or broke protocol).
bool StillOpen(int fd) {
  struct pollfd p {
    fd, POLLIN, 0
  };
  return ::poll(&p, 1, 0) == 0;
}

}  // namespace

Status CheckDataCrc(uint32_t answer_flags, uint32_t request_flags, const wire::GetReply& reply,
                    uint32_t actual) {
  if (!(request_flags & wire::kFlagDataCrc)) return Status::Ok();
  if (!(answer_flags & wire::kFlagDataCrc)) {
    return Status::Error(EPROTO, "GET answer without the data checksum asked for");
  }
  if (actual != reply.data_crc) {
    spdlog::error("GET data checksum mismatch ({} bytes): dropped", reply.length);
    return Status::IoError("GET data checksum mismatch");
  }
  return Status::Ok();
}

Status CheckDataDigests(uint32_t answer_flags, uint32_t request_flags, const wire::GetReply& reply,
                        std::span<const uint8_t> data) {
  if (!(request_flags & wire::kFlagDataDigests)) return Status::Ok();
  if (!(answer_flags & wire::kFlagDataDigests) || (reply.length > 0 && reply.digests.empty())) {
    return Status::Error(EPROTO, "GET answer without the digests asked for");
  }
  Status st = wire::CheckDigests(reply.digests, data.subspan(0, reply.length));
  if (!st.ok()) return Status::Error(kDigestMismatch, st.message());
  return Status::Ok();
}

TcpPeerClient::TcpPeerClient(PeerAddress peer, ClientOptions options)
    : peer_(std::move(peer)),
      options_(std::move(options)),
      max_connections_(std::max<size_t>(1, options_.connections)) {}

TcpPeerClient::~TcpPeerClient() = default;

Deadline TcpPeerClient::DeadlineFor(const CallOptions& call) const {
  auto timeout = call.timeout.count() > 0 ? call.timeout : options_.request_timeout;
  return Clock::now() + timeout;
}

size_t TcpPeerClient::open_connections() const {
  std::lock_guard lock(mu_);
  return open_;
}

Status TcpPeerClient::Annotate(const Status& st) const {
  if (st.ok()) return st;
  return Status::Error(st.err(), "peer " + peer_.ToString() + ": " + st.message());
}

Result<std::unique_ptr<TcpPeerClient::Connection>> TcpPeerClient::Open(Deadline deadline) {
  const Deadline connect_deadline = std::min(deadline, Clock::now() + options_.connect_timeout);
  KVFS_ASSIGN_OR_RETURN(
      Fd fd, TcpConnect(peer_.host, peer_.port, options_.socket_buffer_bytes, connect_deadline));
  ClientHandshake hs(options_.secret, options_.node_name, options_.expect_node);
  // The handshake frames are tiny; a peer that sends a big one is not a kvfs peer.
  constexpr uint32_t kHandshakeCap = 8192;
  auto exchange = [&](MsgType type, const std::string& meta, MsgType want,
                      ReceivedFrame* reply) -> Status {
    KVFS_RETURN_IF_ERROR(SendFrame(fd.get(), type, 0, 0, meta, {}, deadline));
    KVFS_RETURN_IF_ERROR(RecvFrame(fd.get(), kHandshakeCap, deadline, false, nullptr, reply));
    if (reply->header.type == MsgType::kError) {
      wire::ErrorReply err;
      KVFS_RETURN_IF_ERROR(wire::Decode(wire::AsBytes(reply->meta), &err));
      return Status::Error(err.err, "refused: " + err.message);
    }
    if (reply->header.type != want || !(reply->header.flags & wire::kFlagResponse)) {
      return Status::Error(EPROTO, "unexpected " + std::string(MsgTypeName(reply->header.type)) +
                                       " during the handshake");
    }
    return Status::Ok();
  };
  ReceivedFrame reply;
  KVFS_RETURN_IF_ERROR(
      exchange(MsgType::kHello, wire::Encode(hs.Start()), MsgType::kChallenge, &reply));
  wire::Challenge challenge;
  KVFS_RETURN_IF_ERROR(wire::Decode(wire::AsBytes(reply.meta), &challenge));
  KVFS_ASSIGN_OR_RETURN(wire::Auth auth, hs.OnChallenge(challenge));
  KVFS_RETURN_IF_ERROR(exchange(MsgType::kAuth, wire::Encode(auth), MsgType::kAuthOk, &reply));
  wire::AuthOk ok;
  KVFS_RETURN_IF_ERROR(wire::Decode(wire::AsBytes(reply.meta), &ok));
  KVFS_RETURN_IF_ERROR(hs.OnAuthOk(ok));
  auto conn = std::make_unique<Connection>();
  conn->fd = std::move(fd);
  return conn;
}

Result<std::unique_ptr<TcpPeerClient::Connection>> TcpPeerClient::Acquire(Deadline deadline) {
  {
    std::unique_lock lock(mu_);
    for (;;) {
      while (!idle_.empty()) {
        auto conn = std::move(idle_.back());
        idle_.pop_back();
        if (StillOpen(conn->fd.get())) return conn;
        --open_;  // the peer closed it while idle (restart, error): open a fresh one
      }
      if (open_ < max_connections_) {
        ++open_;
        break;
      }
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && idle_.empty() &&
          open_ >= max_connections_) {
        return Status::Error(ETIMEDOUT, "no free connection before the deadline");
      }
    }
  }
  // Connect outside the lock: a slow connect must not block calls that find an idle socket.
  auto conn = Open(deadline);
  if (!conn.ok()) {
    std::lock_guard lock(mu_);
    --open_;
    cv_.notify_one();
  }
  return conn;
}

void TcpPeerClient::Release(std::unique_ptr<Connection> conn, bool healthy) {
  std::lock_guard lock(mu_);
  if (healthy) {
    idle_.push_back(std::move(conn));
  } else {
    conn.reset();  // a socket that failed mid-request may still carry a late answer
    --open_;
  }
  cv_.notify_one();
}

Result<ReceivedFrame> TcpPeerClient::Call(MsgType type, uint32_t flags, std::string_view meta,
                                          std::span<const uint8_t> data, const DataSink& sink,
                                          Deadline deadline) {
  if (options_.secret.empty()) {
    return Status::Error(EACCES, "peer " + peer_.ToString() + ": no shared secret configured");
  }
  auto acquired = Acquire(deadline);
  if (!acquired.ok()) return Annotate(acquired.status());
  std::unique_ptr<Connection> conn = std::move(acquired).value();
  uint64_t id;
  {
    std::lock_guard lock(mu_);
    id = next_id_++;
  }
  Status st = SendFrame(conn->fd.get(), type, flags, id, meta, data, deadline);
  if (!st.ok()) {
    Release(std::move(conn), false);
    return Annotate(st);
  }
  auto checked_sink = [&](const ReceivedFrame& f) -> Result<std::span<uint8_t>> {
    if (f.header.request_id != id || f.header.type != type) {
      return Status::Error(EPROTO, "answer does not match the request");
    }
    if (!sink) return Status::Error(EPROTO, "unexpected data in the answer");
    return sink(f);
  };
  ReceivedFrame reply;
  st = RecvFrame(conn->fd.get(), options_.max_frame, deadline, false, checked_sink, &reply,
                 /*crc_data=*/(flags & wire::kFlagDataCrc) != 0);
  if (st.ok() && (reply.header.request_id != id || !(reply.header.flags & wire::kFlagResponse) ||
                  (reply.header.type != type && reply.header.type != MsgType::kError))) {
    st = Status::Error(EPROTO, "answer does not match the request");
  }
  if (!st.ok()) {
    Release(std::move(conn), false);
    return Annotate(st);
  }
  if (reply.header.type == MsgType::kError) {
    wire::ErrorReply err;
    Status dst = wire::Decode(wire::AsBytes(reply.meta), &err);
    // After a frame-level error the server closes its end: so do we.
    const bool fatal = !dst.ok() || err.err == EPROTO || err.err == EMSGSIZE || err.err == EACCES;
    Release(std::move(conn), !fatal);
    if (!dst.ok()) return Annotate(dst);
    return Status::Error(err.err, "peer " + peer_.ToString() + ": " + err.message);
  }
  Release(std::move(conn), true);
  return reply;
}

template <typename Reply>
Result<Reply> TcpPeerClient::Simple(MsgType type, const std::string& meta,
                                    const CallOptions& call) {
  KVFS_ASSIGN_OR_RETURN(ReceivedFrame f, Call(type, 0, meta, {}, nullptr, DeadlineFor(call)));
  Reply reply;
  Status st = wire::Decode(wire::AsBytes(f.meta), &reply);
  if (!st.ok()) return Annotate(st);
  return reply;
}

Status TcpPeerClient::Ping(const CallOptions& call) {
  return Simple<wire::Pong>(MsgType::kPing, wire::Encode(wire::Ping{}), call).status();
}

Result<wire::GetReply> TcpPeerClient::Get(const wire::GetRequest& req, std::span<uint8_t> out,
                                          const CallOptions& call) {
  if (out.size() < req.length) return Status::Invalid("GET buffer smaller than the range");
  if (req.length > options_.max_frame - kFrameSlack) {
    return Status::Invalid("GET of " + std::to_string(req.length) +
                           " bytes exceeds one frame; split the range");
  }
  const Deadline deadline = DeadlineFor(call);
  const uint64_t piece = options_.get_piece_bytes;
  if (piece != 0 && req.length > piece) return GetPieces(req, out, piece, deadline);
  if (const uint64_t half = call.split ? SplitHalf(req) : 0)
    return GetPieces(req, out, half, deadline);
  return GetRange(req, out, deadline);
}

uint64_t TcpPeerClient::SplitHalf(const wire::GetRequest& req) const {
  // remotebench, 2 MiB chunks, one reader: 1.65-1.96 GB/s as two 1 MiB halves against
  // 1.34-1.57 whole (docs/transport.md). Not when connections are busy: concurrent callers
  // already overlap the serving node's work, and a half waiting for a connection only queues.
  const uint64_t unit = options_.get_split_unit;
  if (unit == 0 || options_.get_parallel_pieces < 2 || req.length <= unit || req.offset % unit)
    return 0;
  if (IdleCapacity() < 2) return 0;
  return (req.length / 2 + unit - 1) / unit * unit;
}

size_t TcpPeerClient::IdleCapacity() const {
  std::lock_guard lock(mu_);
  const size_t busy = open_ - idle_.size();
  return max_connections_ > busy ? max_connections_ - busy : 0;
}

Result<wire::GetReply> TcpPeerClient::GetPieces(const wire::GetRequest& req, std::span<uint8_t> out,
                                                uint64_t piece, Deadline deadline) {
  // Why pieces: the serving node handles a request in passes (engine read into its buffer,
  // checksum, send) and so does the receiver (receive, checksum). A piece of a few MiB stays in
  // cache from one pass to the next, where a 32 MiB answer goes through memory on every pass;
  // and with two pieces in flight on two connections, one's engine read overlaps the other's
  // transfer. Only connections nobody uses take part: concurrent callers already keep the pool
  // busy, and a piece waiting for a connection would only queue behind them.
  const size_t count = static_cast<size_t>((req.length + piece - 1) / piece);
  const size_t ways = std::max<size_t>(
      1, std::min({IdleCapacity(), count, std::max<size_t>(1, options_.get_parallel_pieces)}));
  std::vector<Result<wire::GetReply>> replies(count, Status::IoError("piece not fetched"));
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto worker = [&] {
    for (size_t i = next++; i < count && !failed.load(); i = next++) {
      wire::GetRequest r = req;
      r.offset = req.offset + i * piece;
      r.length = std::min<uint64_t>(piece, req.length - i * piece);
      replies[i] = GetRange(r, out.subspan(i * piece, r.length), deadline);
      if (!replies[i].ok()) failed = true;
    }
  };
  std::vector<std::thread> helpers;
  for (size_t w = 1; w < ways; ++w) {
    try {
      helpers.emplace_back(worker);
    } catch (const std::system_error&) {
      break;  // no thread to be had: the pieces are fetched by the threads there are
    }
  }
  worker();
  for (auto& h : helpers) h.join();
  // Combine: one version, and the bytes that exist form a prefix (a piece past the end of the
  // chunk answers 0 bytes). Anything else means the chunk changed between the pieces: read it
  // again in one GET, which cannot mix versions.
  wire::GetReply all;
  bool consistent = true;
  bool short_seen = false;
  for (size_t i = 0; i < count; ++i) {
    if (!replies[i].ok()) return replies[i].status();
    const wire::GetReply& r = *replies[i];
    if (i == 0) {
      all.object_size = r.object_size;
      all.version = r.version;
    } else if (r.version != all.version || r.object_size != all.object_size) {
      consistent = false;
    }
    if (short_seen && r.length > 0) consistent = false;
    if (r.length < std::min<uint64_t>(piece, req.length - i * piece)) short_seen = true;
    all.length += r.length;
  }
  if (!consistent) return GetRange(req, out, deadline);
  // The pieces' CRCs were each checked on arrival; the combined answer has no single CRC.
  all.data_crc = 0;
  return all;
}

Result<wire::GetReply> TcpPeerClient::GetRange(const wire::GetRequest& req, std::span<uint8_t> out,
                                               Deadline deadline) {
  if (!options_.data_checksums) return GetOnce(req, out, 0, deadline);
  Result<wire::GetReply> r = GetOnce(req, out, wire::kFlagDataDigests, deadline);
  if (r.ok() || r.status().err() != kDigestMismatch) return r;
  // The bytes do not match the serving engine's checksums: damaged on the way, or on its disk.
  // Asked again with a CRC instead, the server checks its copy first (a corrupt one is dropped
  // there and the answer is EIO, so the caller moves to another replica).
  spdlog::warn("{}; reading it again with the server's check", r.status().ToString());
  return GetOnce(req, out, wire::kFlagDataCrc, deadline);
}

Result<wire::GetReply> TcpPeerClient::GetOnce(const wire::GetRequest& req, std::span<uint8_t> out,
                                              uint32_t flags, Deadline deadline) {
  auto sink = [&](const ReceivedFrame& f) -> Result<std::span<uint8_t>> {
    if (f.data_len > req.length) return Status::Error(EPROTO, "GET answer longer than asked");
    return out.subspan(0, f.data_len);
  };
  KVFS_ASSIGN_OR_RETURN(ReceivedFrame f,
                        Call(MsgType::kGet, flags, wire::Encode(req), {}, sink, deadline));
  wire::GetReply reply;
  Status st = wire::Decode(wire::AsBytes(f.meta), &reply);
  if (st.ok() && (reply.length != f.data_len || reply.remote)) {
    st = Status::Error(EPROTO, "GET answer length does not match its data");
  }
  if (st.ok()) st = CheckDataCrc(f.header.flags, flags, reply, f.data_crc);
  if (st.ok()) st = CheckDataDigests(f.header.flags, flags, reply, out);
  if (!st.ok()) return Annotate(st);
  reply.digests.clear();  // checked: what the caller gets is verified bytes
  return reply;
}

Result<wire::PutReply> TcpPeerClient::Put(const wire::PutRequest& req,
                                          std::span<const uint8_t> data, const CallOptions& call) {
  if (data.size() > options_.max_frame - kFrameSlack) {
    return Status::Error(EFBIG,
                         "PUT of " + std::to_string(data.size()) + " bytes exceeds the frame cap");
  }
  wire::PutRequest full = req;
  full.length = data.size();
  uint32_t flags = 0;
  if (options_.data_checksums) {
    full.data_crc = wire::Crc32c(data.data(), data.size());
    flags |= wire::kFlagDataCrc;
  }
  KVFS_ASSIGN_OR_RETURN(ReceivedFrame f, Call(MsgType::kPut, flags, wire::Encode(full), data,
                                              nullptr, DeadlineFor(call)));
  wire::PutReply reply;
  Status st = wire::Decode(wire::AsBytes(f.meta), &reply);
  if (!st.ok()) return Annotate(st);
  return reply;
}

Result<StoreStats> TcpPeerClient::Stats(const CallOptions& call) {
  return Simple<StoreStats>(MsgType::kStats, wire::Encode(wire::StatsRequest{}), call);
}

}  // namespace kvfs
