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
constexpr size_t kMaxListEntries = 65536;
constexpr size_t kNonceSize = 32;
constexpr size_t kProofSize = 32;  // HMAC-SHA256

enum class MsgType : uint16_t {
  kHello = 1,      // client -> server: node name + client nonce
  kChallenge = 2,  // server -> client: server nonce
  kAuth = 3,       // client -> server: client proof
  kAuthOk = 4,     // server -> client: server proof
  kPing = 5,
  kLookup = 6,
  kList = 7,
  kGet = 8,
  kPut = 9,
  kRemove = 10,
  kRename = 11,
  kStats = 12,
  kError = 13,        // a response only: errno + message
  kRdmaRelease = 14,  // client -> server: done READing a granted buffer
  // Cluster namespace (engine/cluster): a node pushes the records of one of its changes to every
  // peer; a (re)joining node pulls a peer's whole namespace to catch up on what it missed.
  kNamespacePush = 15,
  kNamespacePull = 16,
};
constexpr uint16_t kMaxMsgType = 16;
std::string_view MsgTypeName(MsgType type);

enum FrameFlags : uint32_t {
  kFlagResponse = 1u << 0,  // set on every server -> client frame
  kFlagRdmaData = 1u << 1,  // GET: answer with a RemoteBuffer grant instead of inline data
  // On a PUT request: its data_crc is set and must be checked. On a GET request: please set
  // data_crc on the answer (the answer then carries the flag too).
  kFlagDataCrc = 1u << 2,
};
constexpr uint32_t kKnownFlags = kFlagResponse | kFlagRdmaData | kFlagDataCrc;

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
};
struct Ping {};
struct Pong {};

// What a peer knows about one name. `version` changes with every publish of the name, so a
// reader can tell that a GET served a different version than the one it looked up.
struct ObjectInfo {
  bool exists = false;
  ObjectType type = ObjectType::kFile;
  uint32_t mode = 0;
  uint32_t flags = 0;
  uint64_t size = 0;
  Timespec64 mtime;
  uint64_t id = 0;       // the object id on the serving node
  uint64_t version = 0;  // 0 = unknown
};

struct LookupRequest {
  std::string path;
};
using LookupReply = ObjectInfo;

struct ListRequest {
  std::string path;    // the directory
  std::string cursor;  // "" = from the start; otherwise a ListReply::next_cursor
  uint32_t max_entries = 1024;
};
struct DirEntry {
  std::string name;
  ObjectInfo info;
};
struct ListReply {
  std::vector<DirEntry> entries;
  std::string next_cursor;  // pass back to continue
  bool done = true;         // no entries after these
};

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
};

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

struct RemoveRequest {
  std::string path;
};
struct RemoveReply {};

enum RenameFlags : uint32_t { kRenameNoReplace = 1u << 0 };
struct RenameRequest {
  std::string from;
  std::string to;
  uint32_t flags = 0;
};
struct RenameReply {};

struct StatsRequest {};
using StatsReply = StoreStats;

struct ErrorReply {
  int32_t err = EIO;  // positive errno
  std::string message;
};

struct RdmaRelease {
  uint64_t token = 0;
};

// One namespace record as the cluster replicates it: the ObjectRecord fields plus where its
// chunk lives. `chunk_key` is fixed at publish (origin node + object id), so a rename carries the
// same key and never moves data. (stamp, origin) orders concurrent changes: last writer wins.
struct NamespaceRecord {
  uint64_t id = 0;
  uint64_t parent = 0;
  std::string name;
  ObjectType type = ObjectType::kFile;
  uint32_t mode = 0, uid = 0, gid = 0, flags = 0;
  Timespec64 atime, mtime, ctime;
  std::string symlink_target;
  uint64_t prefix_parent = 0;
  uint64_t size = 0;
  std::string chunk_key;           // "" for directories, symlinks and empty files
  std::vector<uint16_t> replicas;  // node ids holding the chunk, in ranking order
  uint64_t stamp = 0;              // wall-clock nanoseconds of the change at its origin
  uint16_t origin = 0;             // node id that made the change
  // Encoded after `origin` only when set (flagged in the type byte), so plain records keep the
  // original encoding.
  uint64_t rdev = 0;
  std::vector<Link> extra_links;  // hard links beyond (parent, name)
};
struct NamespaceRemove {
  uint64_t id = 0;
  uint64_t stamp = 0;
  uint16_t origin = 0;
};
// A push carries one MetaBatch's worth of changes; a pull answer carries a whole namespace.
struct NamespaceUpdate {
  uint16_t origin = 0;  // the sending node
  std::vector<NamespaceRecord> puts;
  std::vector<NamespaceRemove> removes;
};
struct NamespaceAck {};
struct NamespacePullRequest {
  uint16_t node = 0;  // the asking node, for the peer's logs
};
// Caps a namespace frame's record count so a corrupt count cannot make a peer allocate wildly;
// a pull of more records than this needs paging (not implemented yet).
constexpr size_t kMaxNamespaceRecords = 1u << 20;
constexpr size_t kMaxChunkKeyLen = 255;
constexpr size_t kMaxReplicas = 64;

// Encoders append the meta encoding; decoders parse exactly `bytes` (trailing bytes are an
// error) and return EPROTO on anything malformed.
std::string Encode(const Hello& m);
std::string Encode(const Challenge& m);
std::string Encode(const Auth& m);
std::string Encode(const AuthOk& m);
std::string Encode(const Ping& m);
std::string Encode(const Pong& m);
std::string Encode(const ObjectInfo& m);
std::string Encode(const LookupRequest& m);
std::string Encode(const ListRequest& m);
std::string Encode(const ListReply& m);
std::string Encode(const GetRequest& m);
std::string Encode(const GetReply& m);
std::string Encode(const PutRequest& m);
std::string Encode(const PutReply& m);
std::string Encode(const RemoveRequest& m);
std::string Encode(const RemoveReply& m);
std::string Encode(const RenameRequest& m);
std::string Encode(const RenameReply& m);
std::string Encode(const StatsRequest& m);
std::string Encode(const StoreStats& m);
std::string Encode(const ErrorReply& m);
std::string Encode(const RdmaRelease& m);
std::string Encode(const NamespaceUpdate& m);
std::string Encode(const NamespaceAck& m);
std::string Encode(const NamespacePullRequest& m);

Status Decode(std::span<const uint8_t> bytes, Hello* m);
Status Decode(std::span<const uint8_t> bytes, Challenge* m);
Status Decode(std::span<const uint8_t> bytes, Auth* m);
Status Decode(std::span<const uint8_t> bytes, AuthOk* m);
Status Decode(std::span<const uint8_t> bytes, Ping* m);
Status Decode(std::span<const uint8_t> bytes, Pong* m);
Status Decode(std::span<const uint8_t> bytes, ObjectInfo* m);
Status Decode(std::span<const uint8_t> bytes, LookupRequest* m);
Status Decode(std::span<const uint8_t> bytes, ListRequest* m);
Status Decode(std::span<const uint8_t> bytes, ListReply* m);
Status Decode(std::span<const uint8_t> bytes, GetRequest* m);
Status Decode(std::span<const uint8_t> bytes, GetReply* m);
Status Decode(std::span<const uint8_t> bytes, PutRequest* m);
Status Decode(std::span<const uint8_t> bytes, PutReply* m);
Status Decode(std::span<const uint8_t> bytes, RemoveRequest* m);
Status Decode(std::span<const uint8_t> bytes, RemoveReply* m);
Status Decode(std::span<const uint8_t> bytes, RenameRequest* m);
Status Decode(std::span<const uint8_t> bytes, RenameReply* m);
Status Decode(std::span<const uint8_t> bytes, StatsRequest* m);
Status Decode(std::span<const uint8_t> bytes, StoreStats* m);
Status Decode(std::span<const uint8_t> bytes, ErrorReply* m);
Status Decode(std::span<const uint8_t> bytes, RdmaRelease* m);
Status Decode(std::span<const uint8_t> bytes, NamespaceUpdate* m);
Status Decode(std::span<const uint8_t> bytes, NamespaceAck* m);
Status Decode(std::span<const uint8_t> bytes, NamespacePullRequest* m);

inline std::span<const uint8_t> AsBytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace kvfs::wire
