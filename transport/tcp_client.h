// PeerClient over TCP: a pool of up to `connections` authenticated sockets to one peer, each
// carrying one request at a time. A call takes an idle connection (or opens one, or waits for
// one) and holds it until its answer is in; concurrency per peer is the pool size.
#pragma once

#include <cerrno>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include "kvfs/transport.h"
#include "tcp_frame_io.h"

namespace kvfs {

// Checks a GET answer's data CRC32C (`actual`, computed over the bytes received) against the
// one the server sent, when the request asked for it (kFlagDataCrc): EIO on a mismatch, EPROTO
// when the server left the checksum out.
Status CheckDataCrc(uint32_t answer_flags, uint32_t request_flags, const wire::GetReply& reply,
                    uint32_t actual);

// The errno CheckDataDigests gives when the bytes do not match their digests. Never returned
// to a GET's caller: the GET is asked again with kFlagDataCrc, which the server checks first.
constexpr int kDigestMismatch = EBADMSG;
// Checks a GET answer's digests (kFlagDataDigests, when the request asked for them) against the
// bytes received: kDigestMismatch when one does not match, EPROTO when the server left them out.
Status CheckDataDigests(uint32_t answer_flags, uint32_t request_flags, const wire::GetReply& reply,
                        std::span<const uint8_t> data);

class TcpPeerClient : public PeerClient {
 public:
  TcpPeerClient(PeerAddress peer, ClientOptions options);
  ~TcpPeerClient() override;

  const PeerAddress& address() const override { return peer_; }
  Status Ping(const CallOptions& call) override;
  Result<wire::GetReply> Get(const wire::GetRequest& req, std::span<uint8_t> out,
                             const CallOptions& call) override;
  Result<wire::PutReply> Put(const wire::PutRequest& req, std::span<const uint8_t> data,
                             const CallOptions& call) override;
  Result<StoreStats> Stats(const CallOptions& call) override;

  // One request/response exchange (used by the typed calls above and by the RDMA client for
  // its control messages). The answer's data, if any, goes where `sink` says. A remote ERROR
  // frame comes back as its Status; the connection stays in the pool.
  // With kFlagDataCrc in `flags`, the answer's data CRC is computed as it arrives
  // (ReceivedFrame::data_crc).
  Result<ReceivedFrame> Call(wire::MsgType type, uint32_t flags, std::string_view meta,
                             std::span<const uint8_t> data, const DataSink& sink,
                             Deadline deadline);
  Deadline DeadlineFor(const CallOptions& call) const;
  // Connections open now (idle + busy), for tests and stats.
  size_t open_connections() const;

 private:
  struct Connection {
    Fd fd;
  };
  // Connections a call could use right now without waiting (idle or not yet opened).
  size_t IdleCapacity() const;
  // The first half's length when a GET of at most one piece goes as two (0: it goes whole).
  uint64_t SplitHalf(const wire::GetRequest& req) const;
  // A GET longer than one piece, or split in halves: fetched piece by piece over up to
  // IdleCapacity() connections.
  Result<wire::GetReply> GetPieces(const wire::GetRequest& req, std::span<uint8_t> out,
                                   uint64_t piece, Deadline deadline);
  // One range in one GET: with digests when data_checksums is on, asked again with a CRC when
  // the bytes do not match them.
  Result<wire::GetReply> GetRange(const wire::GetRequest& req, std::span<uint8_t> out,
                                  Deadline deadline);
  Result<wire::GetReply> GetOnce(const wire::GetRequest& req, std::span<uint8_t> out,
                                 uint32_t flags, Deadline deadline);
  Result<std::unique_ptr<Connection>> Acquire(Deadline deadline);
  void Release(std::unique_ptr<Connection> conn, bool healthy);
  Result<std::unique_ptr<Connection>> Open(Deadline deadline);
  Status Annotate(const Status& st) const;
  template <typename Reply>
  Result<Reply> Simple(wire::MsgType type, const std::string& meta, const CallOptions& call);

  const PeerAddress peer_;
  const ClientOptions options_;
  const size_t max_connections_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<Connection>> idle_;
  size_t open_ = 0;
  uint64_t next_id_ = 1;
};

}  // namespace kvfs
