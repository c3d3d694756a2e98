#include "kvfs/wire.h"

#include <xxhash.h>

#include <cstring>

#include "byte_codec.h"

namespace kvfs::wire {
namespace {

Status Malformed(std::string_view what) {
  return Status::Error(EPROTO, "malformed " + std::string(what) + " frame");
}

}  // namespace

// CRC32C (Crc32c, Crc32cExtend, Crc32cPortable) lives in crc32c.cc.

namespace {

void PutLe(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t GetLe(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

void PutTime(ByteWriter& w, const Timespec64& t) {
  w.I64(t.sec);
  w.I64(t.nsec);
}
Timespec64 GetTime(ByteReader& r) {
  Timespec64 t;
  t.sec = r.I64();
  t.nsec = r.I64();
  if (t.nsec < 0 || t.nsec >= 1000000000) r.Fail();
  return t;
}

template <typename T, typename Fn>
std::string EncodeWith(const T& m, Fn fn) {
  std::string out;
  ByteWriter w(&out);
  fn(w, m);
  return out;
}

Status Finish(const ByteReader& r, std::string_view what) {
  return r.Done() ? Status::Ok() : Malformed(what);
}

}  // namespace

std::string_view MsgTypeName(MsgType type) {
  switch (type) {
    case MsgType::kHello:
      return "HELLO";
    case MsgType::kChallenge:
      return "CHALLENGE";
    case MsgType::kAuth:
      return "AUTH";
    case MsgType::kAuthOk:
      return "AUTH_OK";
    case MsgType::kPing:
      return "PING";
    case MsgType::kGet:
      return "GET";
    case MsgType::kPut:
      return "PUT";
    case MsgType::kStats:
      return "STATS";
    case MsgType::kError:
      return "ERROR";
    case MsgType::kRdmaRelease:
      return "RDMA_RELEASE";
  }
  return "UNKNOWN";
}

bool KnownMsgType(uint16_t type) {
  switch (static_cast<MsgType>(type)) {
    case MsgType::kHello:
    case MsgType::kChallenge:
    case MsgType::kAuth:
    case MsgType::kAuthOk:
    case MsgType::kPing:
    case MsgType::kGet:
    case MsgType::kPut:
    case MsgType::kStats:
    case MsgType::kError:
    case MsgType::kRdmaRelease:
      return true;
  }
  return false;
}

bool MayCarryData(MsgType type, uint32_t flags) {
  const bool response = flags & kFlagResponse;
  return (type == MsgType::kGet && response && !(flags & kFlagRdmaData)) ||
         (type == MsgType::kPut && !response);
}

void EncodeHeader(const FrameHeader& h, uint8_t out[kHeaderSize]) {
  PutLe(out + 0, kMagic, 4);
  PutLe(out + 4, kVersion, 2);
  PutLe(out + 6, static_cast<uint16_t>(h.type), 2);
  PutLe(out + 8, h.flags, 4);
  PutLe(out + 12, h.payload_len, 4);
  PutLe(out + 16, h.request_id, 8);
  PutLe(out + 24, 0, 4);
  PutLe(out + 28, Crc32c(out, 28), 4);
}

Status DecodeHeader(std::span<const uint8_t> bytes, uint32_t max_frame, FrameHeader* out) {
  if (bytes.size() < kHeaderSize) return Status::Error(EPROTO, "truncated frame header");
  const uint8_t* p = bytes.data();
  if (GetLe(p, 4) != kMagic) return Status::Error(EPROTO, "bad frame magic");
  if (GetLe(p + 28, 4) != Crc32c(p, 28)) return Status::Error(EPROTO, "bad frame header checksum");
  const uint64_t version = GetLe(p + 4, 2);
  if (version != kVersion) {
    return Status::Error(EPROTO, "unsupported protocol version " + std::to_string(version));
  }
  const uint64_t type = GetLe(p + 6, 2);
  if (!KnownMsgType(static_cast<uint16_t>(type))) {
    return Status::Error(EPROTO, "unknown message type " + std::to_string(type));
  }
  const uint32_t flags = static_cast<uint32_t>(GetLe(p + 8, 4));
  if (flags & ~kKnownFlags) return Status::Error(EPROTO, "unknown frame flags");
  if (GetLe(p + 24, 4) != 0) return Status::Error(EPROTO, "reserved header bits set");
  // Fill the header before the size checks: the checksum holds, so the request id is real and
  // an error answer to an oversized frame can name it.
  out->type = static_cast<MsgType>(type);
  out->flags = flags;
  out->payload_len = static_cast<uint32_t>(GetLe(p + 12, 4));
  out->request_id = GetLe(p + 16, 8);
  if (out->payload_len > max_frame) {
    return Status::Error(EMSGSIZE, "frame of " + std::to_string(out->payload_len) +
                                       " bytes over the cap of " + std::to_string(max_frame));
  }
  if (out->payload_len < kMetaLenSize) return Status::Error(EPROTO, "frame payload too short");
  return Status::Ok();
}

std::string EncodeFrame(MsgType type, uint32_t flags, uint64_t request_id, std::string_view meta,
                        std::span<const uint8_t> data) {
  FrameHeader h;
  h.type = type;
  h.flags = flags;
  h.request_id = request_id;
  h.payload_len = static_cast<uint32_t>(kMetaLenSize + meta.size() + data.size());
  std::string out(kHeaderSize + kMetaLenSize, '\0');
  EncodeHeader(h, reinterpret_cast<uint8_t*>(out.data()));
  PutLe(reinterpret_cast<uint8_t*>(out.data()) + kHeaderSize, meta.size(), 4);
  out.append(meta);
  out.append(reinterpret_cast<const char*>(data.data()), data.size());
  return out;
}

Status SplitPayload(const FrameHeader& header, std::span<const uint8_t> payload, FrameView* out) {
  if (payload.size() != header.payload_len || payload.size() < kMetaLenSize) {
    return Status::Error(EPROTO, "frame payload length mismatch");
  }
  const uint64_t meta_len = GetLe(payload.data(), 4);
  if (meta_len > payload.size() - kMetaLenSize) {
    return Status::Error(EPROTO, "frame meta length past the payload");
  }
  out->header = header;
  out->meta = payload.subspan(kMetaLenSize, meta_len);
  out->data = payload.subspan(kMetaLenSize + meta_len);
  if (!out->data.empty() && !MayCarryData(header.type, header.flags)) {
    return Status::Error(EPROTO, std::string(MsgTypeName(header.type)) + " frame carries data");
  }
  return Status::Ok();
}

Status DecodeFrame(std::span<const uint8_t> bytes, uint32_t max_frame, FrameView* out) {
  FrameHeader h;
  KVFS_RETURN_IF_ERROR(DecodeHeader(bytes, max_frame, &h));
  if (bytes.size() - kHeaderSize != h.payload_len) {
    return Status::Error(EPROTO, bytes.size() - kHeaderSize < h.payload_len
                                     ? "truncated frame"
                                     : "trailing bytes after frame");
  }
  return SplitPayload(h, bytes.subspan(kHeaderSize), out);
}

// ---- Message codecs ----

std::string Encode(const Hello& m) {
  return EncodeWith(m, [](ByteWriter& w, const Hello& v) {
    w.Str(v.node);
    w.Raw(v.nonce.data(), v.nonce.size());
  });
}
Status Decode(std::span<const uint8_t> b, Hello* m) {
  ByteReader r(b);
  m->node = r.Str(kMaxNameLen);
  r.Raw(m->nonce.data(), m->nonce.size());
  return Finish(r, "HELLO");
}

std::string Encode(const Challenge& m) {
  return std::string(reinterpret_cast<const char*>(m.nonce.data()), m.nonce.size());
}
Status Decode(std::span<const uint8_t> b, Challenge* m) {
  ByteReader r(b);
  r.Raw(m->nonce.data(), m->nonce.size());
  return Finish(r, "CHALLENGE");
}

std::string Encode(const Auth& m) {
  return std::string(reinterpret_cast<const char*>(m.proof.data()), m.proof.size());
}
Status Decode(std::span<const uint8_t> b, Auth* m) {
  ByteReader r(b);
  r.Raw(m->proof.data(), m->proof.size());
  return Finish(r, "AUTH");
}

std::string Encode(const AuthOk& m) {
  return EncodeWith(m, [](ByteWriter& w, const AuthOk& v) {
    w.Raw(v.proof.data(), v.proof.size());
    w.Str(v.node);
  });
}
Status Decode(std::span<const uint8_t> b, AuthOk* m) {
  ByteReader r(b);
  r.Raw(m->proof.data(), m->proof.size());
  m->node = r.Str(kMaxNameLen);
  return Finish(r, "AUTH_OK");
}

std::string Encode(const Ping&) { return {}; }
Status Decode(std::span<const uint8_t> b, Ping*) {
  return b.empty() ? Status::Ok() : Malformed("PING");
}
std::string Encode(const Pong&) { return {}; }
Status Decode(std::span<const uint8_t> b, Pong*) {
  return b.empty() ? Status::Ok() : Malformed("PING response");
}

std::string Encode(const GetRequest& m) {
  return EncodeWith(m, [](ByteWriter& w, const GetRequest& v) {
    w.Str(v.key);
    w.U64(v.offset);
    w.U64(v.length);
    w.U64(v.version);
  });
}
Status Decode(std::span<const uint8_t> b, GetRequest* m) {
  ByteReader r(b);
  m->key = r.Str(kMaxPathLen);
  m->offset = r.U64();
  m->length = r.U64();
  m->version = r.U64();
  if (m->offset + m->length < m->offset) r.Fail();  // the range wraps around
  return Finish(r, "GET");
}

std::string Encode(const GetReply& m) {
  return EncodeWith(m, [](ByteWriter& w, const GetReply& v) {
    w.U64(v.object_size);
    w.U64(v.version);
    w.U64(v.length);
    w.U32(v.data_crc);
    w.U8(v.remote ? 1 : 0);
    if (v.remote) {
      w.U64(v.remote->token);
      w.U64(v.remote->addr);
      w.U32(v.remote->rkey);
      w.U64(v.remote->length);
    }
    if (!v.digests.empty()) {
      w.U32(static_cast<uint32_t>(v.digests.size()));
      for (const DataDigest& d : v.digests) {
        w.U32(d.length);
        w.U64(d.xxh3);
      }
    }
  });
}
Status Decode(std::span<const uint8_t> b, GetReply* m) {
  ByteReader r(b);
  m->object_size = r.U64();
  m->version = r.U64();
  m->length = r.U64();
  m->data_crc = r.U32();
  m->remote.reset();
  if (r.Bool()) {
    RemoteBuffer rb;
    rb.token = r.U64();
    rb.addr = r.U64();
    rb.rkey = r.U32();
    rb.length = r.U64();
    if (rb.length < m->length) r.Fail();
    m->remote = rb;
  }
  m->digests.clear();
  if (r.remaining() > 0) {
    // Present only when there are any: a count of 0, more than the cap, an empty span or spans
    // that do not add up to `length` are malformed.
    const uint32_t n = r.U32();
    if (n == 0 || n > kMaxDigests || r.remaining() != size_t{n} * 12)
      return Malformed("GET response");
    uint64_t covered = 0;
    m->digests.resize(n);
    for (DataDigest& d : m->digests) {
      d.length = r.U32();
      d.xxh3 = r.U64();
      if (d.length == 0) r.Fail();
      covered += d.length;
    }
    if (covered != m->length) r.Fail();
  }
  return Finish(r, "GET response");
}

Status CheckDigests(const std::vector<DataDigest>& digests, std::span<const uint8_t> data) {
  size_t pos = 0;
  for (const DataDigest& d : digests) {
    if (d.length > data.size() - pos) {
      return Status::IoError("GET digests cover more than the data");
    }
    if (XXH3_64bits(data.data() + pos, d.length) != d.xxh3) {
      return Status::IoError("GET data digest mismatch at byte " + std::to_string(pos) + " (" +
                             std::to_string(d.length) + " bytes)");
    }
    pos += d.length;
  }
  if (pos != data.size()) return Status::IoError("GET digests do not cover the data");
  return Status::Ok();
}

std::string Encode(const PutRequest& m) {
  return EncodeWith(m, [](ByteWriter& w, const PutRequest& v) {
    w.Str(v.key);
    w.U32(v.mode);
    w.U32(v.flags);
    PutTime(w, v.mtime);
    w.U64(v.prefix_parent);
    w.U64(v.length);
    w.U32(v.data_crc);
  });
}
Status Decode(std::span<const uint8_t> b, PutRequest* m) {
  ByteReader r(b);
  m->key = r.Str(kMaxPathLen);
  m->mode = r.U32();
  if (m->mode & ~07777u) r.Fail();
  m->flags = r.U32();
  m->mtime = GetTime(r);
  m->prefix_parent = r.U64();
  m->length = r.U64();
  m->data_crc = r.U32();
  return Finish(r, "PUT");
}

std::string Encode(const PutReply& m) {
  return EncodeWith(m, [](ByteWriter& w, const PutReply& v) {
    w.U64(v.id);
    w.U64(v.version);
  });
}
Status Decode(std::span<const uint8_t> b, PutReply* m) {
  ByteReader r(b);
  m->id = r.U64();
  m->version = r.U64();
  return Finish(r, "PUT response");
}

std::string Encode(const StatsRequest&) { return {}; }
Status Decode(std::span<const uint8_t> b, StatsRequest*) {
  return b.empty() ? Status::Ok() : Malformed("STATS");
}

std::string Encode(const StoreStats& m) {
  return EncodeWith(m, [](ByteWriter& w, const StoreStats& v) {
    for (uint64_t x : {v.capacity_bytes, v.used_bytes, v.logical_bytes, v.objects, v.files, v.reads,
                       v.writes, v.bytes_read, v.bytes_written, v.checksum_failures, v.evictions,
                       v.journal_bytes, v.segment_size}) {
      w.U64(x);
    }
    w.U32(static_cast<uint32_t>(v.devices.size()));
    for (const std::string& d : v.devices) w.Str(d);
  });
}
Status Decode(std::span<const uint8_t> b, StoreStats* m) {
  ByteReader r(b);
  for (uint64_t* x : {&m->capacity_bytes, &m->used_bytes, &m->logical_bytes, &m->objects, &m->files,
                      &m->reads, &m->writes, &m->bytes_read, &m->bytes_written,
                      &m->checksum_failures, &m->evictions, &m->journal_bytes, &m->segment_size}) {
    *x = r.U64();
  }
  const uint32_t n = r.U32();
  if (n > 1024 || n > r.remaining() / 4) r.Fail();
  m->devices.clear();
  for (uint32_t i = 0; i < n && r.ok(); ++i) m->devices.push_back(r.Str(kMaxPathLen));
  return Finish(r, "STATS response");
}

std::string Encode(const ErrorReply& m) {
  return EncodeWith(m, [](ByteWriter& w, const ErrorReply& v) {
    w.I32(v.err);
    w.Str(v.message.size() > kMaxMessageLen ? v.message.substr(0, kMaxMessageLen) : v.message);
  });
}
Status Decode(std::span<const uint8_t> b, ErrorReply* m) {
  ByteReader r(b);
  m->err = r.I32();
  if (m->err <= 0 || m->err > 4095) r.Fail();
  m->message = r.Str(kMaxMessageLen, /*no_nul=*/false);
  return Finish(r, "ERROR");
}

std::string Encode(const RdmaRelease& m) {
  return EncodeWith(m, [](ByteWriter& w, const RdmaRelease& v) { w.U64(v.token); });
}
Status Decode(std::span<const uint8_t> b, RdmaRelease* m) {
  ByteReader r(b);
  m->token = r.U64();
  return Finish(r, "RDMA_RELEASE");
}

}  // namespace kvfs::wire
