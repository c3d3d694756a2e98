#include "tcp_frame_io.h"

#include <algorithm>

namespace kvfs {

Status SendFrame(int fd, wire::MsgType type, uint32_t flags, uint64_t request_id,
                 std::string_view meta, std::span<const uint8_t> data, Deadline deadline) {
  const uint64_t payload = wire::kMetaLenSize + meta.size() + data.size();
  if (payload > UINT32_MAX) return Status::Error(EMSGSIZE, "frame too large to encode");
  uint8_t head[wire::kHeaderSize + wire::kMetaLenSize];
  wire::FrameHeader h;
  h.type = type;
  h.flags = flags;
  h.request_id = request_id;
  h.payload_len = static_cast<uint32_t>(payload);
  wire::EncodeHeader(h, head);
  for (int i = 0; i < 4; ++i)
    head[wire::kHeaderSize + i] = static_cast<uint8_t>(meta.size() >> (8 * i));
  struct iovec iov[3] = {
      {head, sizeof head},
      {const_cast<char*>(meta.data()), meta.size()},
      {const_cast<uint8_t*>(data.data()), data.size()},
  };
  return SendAll(fd, iov, 3, deadline);
}

Status RecvFrame(int fd, uint32_t max_frame, Deadline deadline, bool eof_ok, const DataSink& sink,
                 ReceivedFrame* out, bool crc_data) {
  // The header alone first: a bad or oversized header is refused before we wait for more.
  uint8_t head[wire::kHeaderSize];
  struct iovec hv = {head, sizeof head};
  KVFS_RETURN_IF_ERROR(RecvAll(fd, &hv, 1, deadline, eof_ok));
  KVFS_RETURN_IF_ERROR(wire::DecodeHeader({head, wire::kHeaderSize}, max_frame, &out->header));
  uint8_t len_bytes[wire::kMetaLenSize];
  struct iovec lv = {len_bytes, sizeof len_bytes};
  KVFS_RETURN_IF_ERROR(RecvAll(fd, &lv, 1, deadline));
  uint64_t meta_len = 0;
  for (int i = 0; i < 4; ++i) meta_len |= static_cast<uint64_t>(len_bytes[i]) << (8 * i);
  const uint64_t room = out->header.payload_len - wire::kMetaLenSize;
  if (meta_len > room) return Status::Error(EPROTO, "frame meta length past the payload");
  out->data_len = room - meta_len;
  if (out->data_len > 0 && !wire::MayCarryData(out->header.type, out->header.flags)) {
    return Status::Error(EPROTO,
                         std::string(wire::MsgTypeName(out->header.type)) + " frame carries data");
  }
  out->meta.resize(meta_len);
  struct iovec mv = {out->meta.data(), meta_len};
  KVFS_RETURN_IF_ERROR(RecvAll(fd, &mv, 1, deadline));
  if (out->data_len == 0) return Status::Ok();
  if (!sink) return Status::Error(EPROTO, "unexpected frame data");
  auto target = sink(*out);
  if (!target.ok()) return target.status();
  if (target->size() != out->data_len) return Status::Error(EPROTO, "frame data length mismatch");
  if (!crc_data || !(out->header.flags & wire::kFlagDataCrc)) {
    struct iovec dv = {target->data(), target->size()};
    return RecvAll(fd, &dv, 1, deadline);
  }
  constexpr size_t kPiece = 1u << 20;  // fits in L2: checksummed before it is evicted
  uint32_t crc = 0;
  for (size_t done = 0; done < target->size();) {
    const size_t n = std::min(kPiece, target->size() - done);
    struct iovec dv = {target->data() + done, n};
    KVFS_RETURN_IF_ERROR(RecvAll(fd, &dv, 1, deadline));
    crc = wire::Crc32cExtend(crc, target->data() + done, n);
    done += n;
  }
  out->data_crc = crc;
  return Status::Ok();
}

}  // namespace kvfs
