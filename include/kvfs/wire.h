// The peer wire protocol: every message between kvfs nodes is one frame.
//
//   frame   = header (32 bytes) + payload (payload_len bytes)
//   payload = meta_len (u32) + meta (meta_len bytes, the encoded message) + data (the rest)
//
// Header, little-endian:
//   0  u32 magic "KVFW"      4  u16 version     6  u16 type     8  u32 flags
//   12 u32 payload_len       16 u64 request_id  24 u32 reserved (0)
//   28 u32 crc32c of bytes 0..27
//
// Only two frames carry data after the meta: a GET response (the chunk bytes) and a PUT request
// (the bytes to publish). Keeping the data out of the encoded meta lets both ends move it with
// scatter-gather I/O straight between the socket and the caller's buffer (or, over RDMA, with a
// one-sided READ), never through a concatenation copy.
//
// Decoders are strict: any frame with a bad magic, version, checksum, type, flag, a length over
// the cap or one that does not add up, or a meta that does not parse exactly, is rejected with
// EPROTO (EMSGSIZE for an oversized frame). They never read past the bytes they are given.
// See docs/transport.md.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvfs/chunk_store.h"
#include "kvfs/object.h"
#include "kvfs/status.h"

namespace kvfs::wire {

constexpr uint32_t kMagic = 0x5746564B;  // "KVFW" as little-endian bytes
constexpr uint16_t kVersion = 1;
constexpr size_t kHeaderSize = 32;
constexpr size_t kMetaLenSize = 4;
// Default cap on payload_len: a 32 MiB chunk and more fit, a corrupt length cannot make a peer
// allocate gigabytes.
constexpr uint32_t kDefaultMaxFrame = 96u << 20;
// Limits on the fields inside meta.
constexpr size_t kMaxPathLen = 4096;
constexpr size_t kMaxNameLen = 255;
constexpr size_t kMaxMessageLen = 4096;
constexpr size_t kNonceSize = 32;
constexpr size_t kProofSize = 32;  // HMAC-SHA256

enum class MsgType : uint16_t {
  kHello = 1,      // client -> server: node name + client nonce
  kChallenge = 2,  // server -> client: server nonce
  kAuth = 3,       // client -> server: client proof
  kAuthOk = 4,     // server -> client: server proof
  kPing = 5,
  // 6, 7, 10, 11, 15 and 16 were LOOKUP, LIST, REMOVE, RENAME and the namespace push/pull of
  // the cluster before etcd held its namespace: retired, refused as unknown, never reused.
  kGet = 8,
  kPut = 9,
  kStats = 12,
  kError = 13,        // a response only: errno + message
  kRdmaRelease = 14,  // client -> server: done READing a granted buffer
};
constexpr uint16_t kMaxMsgType = 14;
// Whether `type` is a message this protocol version has (the retired numbers are not).
bool KnownMsgType(uint16_t type);
std::string_view MsgTypeName(MsgType type);

enum FrameFlags : uint32_t {
  kFlagResponse = 1u << 0,  // set on every server -> client frame
  kFlagRdmaData = 1u << 1,  // GET: answer with a RemoteBuffer grant instead of inline data
  // On a PUT request: its data_crc is set and must be checked. On a GET request: please set
  // data_crc on the answer (the answer then carries the flag too).
  kFlagDataCrc = 1u << 2,
  // On a GET request: answer with GetReply::digests, the XXH3-64 of consecutive spans of the
  // data (the answer then carries the flag too). Where the serving engine keeps a span's digest
  // already (a segment stored raw, sent whole), that stored checksum travels with the bytes and
  // the receiver's check is the only one: see docs/transport.md "One checksum end to end".
  kFlagDataDigests = 1u << 3,
};
constexpr uint32_t kKnownFlags = kFlagResponse | kFlagRdmaData | kFlagDataCrc | kFlagDataDigests;
// The most digests one GET answer carries (a 96 MiB frame of 64 KiB segments needs 1,536).
constexpr size_t kMaxDigests = 4096;

struct FrameHeader {
  MsgType type = MsgType::kPing;
  uint32_t flags = 0;
  uint64_t request_id = 0;
  uint32_t payload_len = 0;  // meta_len field + meta + data
};

// True for the frames that may carry data after the meta.
bool MayCarryData(MsgType type, uint32_t flags);

// CRC32C (Castagnoli); the header checksum is Crc32c(bytes 0..27), chunk data is optionally
// covered by one too (kFlagDataCrc). Uses the SSE4.2 instruction when the CPU has it.
uint32_t Crc32c(const void* data, size_t len);
// Continues a CRC over more bytes: Crc32cExtend(Crc32c(a), b) == Crc32c(a followed by b), and
// Crc32cExtend(0, a) == Crc32c(a). Lets a receiver checksum data piece by piece as it arrives.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t len);
uint32_t Crc32cPortable(const void* data, size_t len);  // the table version, for tests

void EncodeHeader(const FrameHeader& header, uint8_t out[kHeaderSize]);
// Checks magic, version, checksum, type, flags, reserved bits and payload_len <= max_frame.
Status DecodeHeader(std::span<const uint8_t> bytes, uint32_t max_frame, FrameHeader* out);

// A whole frame in one buffer (small messages, tests). Streams build the same bytes in pieces.
std::string EncodeFrame(MsgType type, uint32_t flags, uint64_t request_id, std::string_view meta,
                        std::span<const uint8_t> data = {});
struct FrameView {
  FrameHeader header;
  std::span<const uint8_t> meta;
  std::span<const uint8_t> data;
};
// `bytes` must be exactly one frame. The spans point into `bytes`.
Status DecodeFrame(std::span<const uint8_t> bytes, uint32_t max_frame, FrameView* out);
// Splits a payload (after the header) into meta and data, checking every length.
Status SplitPayload(const FrameHeader& header, std::span<const uint8_t> payload, FrameView* out);

// ---- Messages (the meta of each frame) ----

using Nonce = std::array<uint8_t, kNonceSize>;
using Proof = std::array<uint8_t, kProofSize>;

struct Hello {
  std::string node;  // the client's node name, for logs (<= kMaxNameLen)
  Nonce nonce{};
};
struct Challenge {
  Nonce nonce{};
};
struct Auth {
  Proof proof{};
};
struct AuthOk {
  Proof proof{};
  std::string node;  // the server's node name: a client that meant another node hangs up
};
struct Ping {};
struct Pong {};

// GET reads [offset, offset + length) of a chunk, named by path or by an object key.
struct GetRequest {
  std::string key;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t version = 0;  // non-zero: fail with ESTALE unless the chunk is this version
};
// Where an RDMA client READs the bytes of a GET: the server keeps the buffer registered until the
// client sends RdmaRelease{token} or the grant times out.
struct RemoteBuffer {
  uint64_t token = 0;
  uint64_t addr = 0;
  uint32_t rkey = 0;
  uint64_t length = 0;
};
struct GetReply {
  uint64_t object_size = 0;  // the whole chunk's size (a short read at the tail is not an error)
  uint64_t version = 0;
  uint64_t length = 0;    // bytes of data following (TCP) or in `remote` (RDMA)
  uint32_t data_crc = 0;  // Crc32c of the data when the frame has kFlagDataCrc
  std::optional<RemoteBuffer> remote;
  // With kFlagDataDigests: spans covering the `length` bytes in order, each non-empty (encoded
  // after `remote`, only when there are any, so an answer without them reads as before).
  std::vector<DataDigest> digests;
};
// EIO unless `digests` cover `data` exactly and every span's XXH3-64
// matches. The receiver's check of kFlagDataDigests.
Status CheckDigests(const std::vector<DataDigest>& digests, std::span<const uint8_t> data);

// PUT publishes a whole chunk (the data follows the meta) atomically under `key`.
struct PutRequest {
  std::string key;
  uint32_t mode = 0644;
  uint32_t flags = 0;  // ObjectFlags
  Timespec64 mtime;
  uint64_t prefix_parent = 0;  // eviction hint, see ObjectRecord
  uint64_t length = 0;         // bytes of data following; must match the frame
  uint32_t data_crc = 0;       // Crc32c of the data when the frame has kFlagDataCrc
};
struct PutReply {
  uint64_t id = 0;
  uint64_t version = 0;
};

struct StatsRequest {};
using StatsReply = StoreStats;

struct ErrorReply {
  int32_t err = EIO;  // positive errno
  std::string message;
};

struct RdmaRelease {
  uint64_t token = 0;
};

// Encoders append the meta encoding; decoders parse exactly `bytes` (trailing bytes are an
// error) and return EPROTO on anything malformed.
std::string Encode(const Hello& m);
std::string Encode(const Challenge& m);
std::string Encode(const Auth& m);
std::string Encode(const AuthOk& m);
std::string Encode(const Ping& m);
std::string Encode(const Pong& m);
std::string Encode(const GetRequest& m);
std::string Encode(const GetReply& m);
std::string Encode(const PutRequest& m);
std::string Encode(const PutReply& m);
std::string Encode(const StatsRequest& m);
std::string Encode(const StoreStats& m);
std::string Encode(const ErrorReply& m);
std::string Encode(const RdmaRelease& m);

Status Decode(std::span<const uint8_t> bytes, Hello* m);
Status Decode(std::span<const uint8_t> bytes, Challenge* m);
Status Decode(std::span<const uint8_t> bytes, Auth* m);
Status Decode(std::span<const uint8_t> bytes, AuthOk* m);
Status Decode(std::span<const uint8_t> bytes, Ping* m);
Status Decode(std::span<const uint8_t> bytes, Pong* m);
Status Decode(std::span<const uint8_t> bytes, GetRequest* m);
Status Decode(std::span<const uint8_t> bytes, GetReply* m);
Status Decode(std::span<const uint8_t> bytes, PutRequest* m);
Status Decode(std::span<const uint8_t> bytes, PutReply* m);
Status Decode(std::span<const uint8_t> bytes, StatsRequest* m);
Status Decode(std::span<const uint8_t> bytes, StoreStats* m);
Status Decode(std::span<const uint8_t> bytes, ErrorReply* m);
Status Decode(std::span<const uint8_t> bytes, RdmaRelease* m);

inline std::span<const uint8_t> AsBytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace kvfs::wire
