// The peer transport: how one kvfs node asks another for names and chunk bytes.
//
//   client side: PeerClient  - one per remote node; thread-safe; a small pool of connections,
//                              every call bounded by a deadline (a dead, slow or partitioned
//                              peer costs at most one timeout, never a hang)
//   server side: PeerServer  - listens, authenticates every connection, and hands each request
//                              to a RequestHandler (implemented by the cluster store over the
//                              local engine) on a pool of worker threads
//
// Both sides speak the framed protocol of kvfs/wire.h, over TCP or, for chunk data, RDMA.
// Every peer proves knowledge of the cluster's shared secret (HMAC-SHA256 challenge-response,
// both ways) before any other request is served. Errors are Status values with a positive errno:
//   ETIMEDOUT     the deadline passed (connect, send or wait for the answer)
//   ECONNREFUSED  / EHOSTUNREACH / ENETUNREACH: the peer cannot be reached
//   ECONNRESET    the connection broke mid-request
//   EACCES        authentication failed (wrong or missing secret)
//   ENXIO         the address answered as another node than ClientOptions::expect_node
//   EPROTO        the peer sent a malformed frame;  EMSGSIZE: a frame over the cap
//   anything else the errno the remote handler returned (ENOENT, ESTALE, EIO, ...)
// A connection that saw a transport error is closed, never reused. See docs/transport.md.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "kvfs/chunk_store.h"
#include "kvfs/status.h"
#include "kvfs/wire.h"

namespace kvfs {

enum class TransportKind { kTcp, kRdma, kAuto };
// "tcp" | "rdma" | "auto".
Result<TransportKind> ParseTransportKind(std::string_view text);
// True when the host has at least one RDMA device (ibv_get_device_list).
bool RdmaDeviceAvailable();

// The cluster's shared secret, read from a file (trailing newline stripped). At least 16 bytes.
class SharedSecret {
 public:
  SharedSecret() = default;
  static Result<SharedSecret> FromFile(const std::string& path);
  static Result<SharedSecret> FromBytes(std::string bytes);
  bool empty() const { return bytes_.empty(); }
  const std::string& bytes() const { return bytes_; }

 private:
  explicit SharedSecret(std::string bytes) : bytes_(std::move(bytes)) {}
  std::string bytes_;
};

struct PeerAddress {
  std::string host;  // numeric IPv4/IPv6 address or a resolvable name
  uint16_t port = 0;
  std::string ToString() const { return host + ":" + std::to_string(port); }
};

// "HOST:PORT" or "[IPv6]:PORT": the port 1..65535, the host a numeric address or a plausible
// DNS name (letters, digits, '-', '.'). EINVAL with the reason otherwise.
Result<PeerAddress> ParsePeerAddress(std::string_view text);
// 0.0.0.0 or :: (in any spelling): an address to listen on, never one another node can dial.
bool IsWildcardHost(std::string_view host);

struct ClientOptions {
  TransportKind kind = TransportKind::kTcp;
  SharedSecret secret;             // required: a client without a secret cannot connect
  std::string node_name = "kvfs";  // sent in HELLO, for the peer's logs
  // The server's node_name this client means to reach; a server that names itself otherwise
  // is refused at the handshake (ENXIO). Empty: any.
  std::string expect_node;
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds request_timeout{5000};  // default per-request deadline
  size_t connections = 4;                           // per peer, used concurrently
  uint32_t max_frame = wire::kDefaultMaxFrame;
  int socket_buffer_bytes = 8 << 20;  // SO_SNDBUF / SO_RCVBUF
  // CRC32C over GET and PUT data, end to end (kFlagDataCrc): a mismatch is EIO, never bytes.
  bool data_checksums = true;
  // A GET longer than this is fetched as pieces of this size, each a whole GET with its own
  // CRC: a piece that fits in cache passes through the serving node's engine read, checksum and
  // send (and the receiver's checksum) without a trip to memory between. 0 = one GET per call.
  uint64_t get_piece_bytes = 2u << 20;
  // The most connections one GET's pieces use at once (only idle ones are taken; more than one
  // costs a helper thread per call; docs/transport.md has what it measured).
  size_t get_parallel_pieces = 1;
  // With get_parallel_pieces > 1 and CallOptions::split, a GET of at most one piece but longer
  // than this unit goes as two halves (each a multiple of the unit, from an offset that is one)
  // when two connections are idle: the serving node reads and sends one half while it sends or
  // reads the other. The serving engine's segment size, so that no segment is read for both halves.
  // 0 = never.
  uint64_t get_split_unit = 1u << 20;
  // RDMA only: the peer's rdma_cm port (0 = its TCP port; rdma_cm ports are their own space on
  // InfiniBand/RoCE) and the most client memory kept registered for READ targets.
  uint16_t rdma_port = 0;
  size_t rdma_register_bytes = 512u << 20;
};

// Per-call settings. timeout 0 = ClientOptions::request_timeout. The deadline covers waiting
// for a free connection, connecting, authenticating, sending and receiving.
struct CallOptions {
  std::chrono::milliseconds timeout{0};
  // A GET of at most one piece may go as two halves (ClientOptions::get_split_unit). For a
  // caller that waits for each GET before the next; a reader that keeps pieces in flight
  // already overlaps them, and splitting only costs it CPU.
  bool split = false;
};

class PeerClient {
 public:
  virtual ~PeerClient() = default;
  virtual const PeerAddress& address() const = 0;

  virtual Status Ping(const CallOptions& call = {}) = 0;
  // Reads up to req.length bytes into `out` (which must hold req.length bytes); the reply says
  // how many arrived (fewer at the end of the chunk). req.length must fit one frame
  // (max_frame - 4 KiB); callers split larger ranges.
  virtual Result<wire::GetReply> Get(const wire::GetRequest& req, std::span<uint8_t> out,
                                     const CallOptions& call = {}) = 0;
  // Publishes `data` atomically under req.key (req.length is set from data.size()).
  virtual Result<wire::PutReply> Put(const wire::PutRequest& req, std::span<const uint8_t> data,
                                     const CallOptions& call = {}) = 0;
  virtual Result<StoreStats> Stats(const CallOptions& call = {}) = 0;
};

// Creates a client for one peer. Connections are opened lazily (and re-opened after a failure)
// by the calls, so a peer that is down now can be used once it is back; this call fails only on
// bad options (no secret, RDMA requested without a device, ...). kAuto picks RDMA when the host
// has an RDMA device and TCP otherwise (logged once).
Result<std::unique_ptr<PeerClient>> MakePeerClient(const PeerAddress& peer,
                                                   const ClientOptions& options);

// What a node serves to its peers. Called concurrently from the server's worker threads; each
// call returns a value or an error Status (sent to the client as an ERROR frame with that errno).
// Exceptions are caught at the server boundary and become EIO.
class RequestHandler {
 public:
  virtual ~RequestHandler() = default;
  // Fills `out` (sized min(req.length, the frame's room)) from the chunk; returns the reply with
  // length = bytes written into out. `digests` is null unless the client asked for them
  // (kFlagDataDigests): the handler then may append the XXH3-64 of consecutive spans covering
  // the bytes (see ChunkStore::ReadForPeer); if it appends none, the server computes one.
  virtual Result<wire::GetReply> Get(const wire::GetRequest& req, std::span<uint8_t> out,
                                     std::vector<DataDigest>* digests) = 0;
  // `data` (req.length bytes) is valid only during the call.
  virtual Result<wire::PutReply> Put(const wire::PutRequest& req,
                                     std::span<const uint8_t> data) = 0;
  virtual Result<StoreStats> Stats() = 0;
};

struct ServerOptions {
  TransportKind kind = TransportKind::kTcp;  // kRdma/kAuto also accept RDMA data reads
  std::string host = "0.0.0.0";
  uint16_t port = 0;               // 0 = an ephemeral port, see PeerServer::port()
  SharedSecret secret;             // required
  std::string node_name = "kvfs";  // sent in AUTH_OK: clients check it is the node they meant
  size_t threads = 8;              // worker threads serving requests
  size_t max_connections = 1024;
  std::chrono::milliseconds io_timeout{10000};   // to receive the rest of a frame or send one
  std::chrono::milliseconds auth_timeout{5000};  // to finish the handshake after accept
  uint32_t max_frame = wire::kDefaultMaxFrame;
  int socket_buffer_bytes = 8 << 20;
  uint16_t rdma_port = 0;                 // RDMA only: rdma_cm listen port (0 = the TCP port)
  size_t rdma_export_bytes = 512u << 20;  // RDMA only: memory for buffers peers READ
};

class PeerServer {
 public:
  virtual ~PeerServer() = default;  // stops the server
  virtual uint16_t port() const = 0;
  // Stops accepting, closes every connection, waits for the workers. Idempotent.
  virtual void Stop() = 0;
};

// Binds, listens and starts serving. `handler` must outlive the server.
Result<std::unique_ptr<PeerServer>> StartPeerServer(const ServerOptions& options,
                                                    RequestHandler* handler);

}  // namespace kvfs
