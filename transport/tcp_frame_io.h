// Frames over a TCP socket. A frame goes out as one sendmsg of four iovecs (header, meta length,
// meta, data) and comes in as header, meta, then the data straight into the buffer the caller's
// sink names: a 32 MiB chunk is never copied between the socket and its final place.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "kvfs/status.h"
#include "kvfs/wire.h"
#include "tcp_socket.h"

namespace kvfs {

struct ReceivedFrame {
  wire::FrameHeader header;
  std::string meta;
  uint64_t data_len = 0;
  uint32_t data_crc = 0;  // Crc32c of the data, when RecvFrame was asked to compute it
};

// Told the frame's header and meta; returns the buffer (exactly data_len bytes) to receive the
// data into, or an error (the connection must then be closed: the data is still in the stream).
using DataSink = std::function<Result<std::span<uint8_t>>(const ReceivedFrame&)>;

Status SendFrame(int fd, wire::MsgType type, uint32_t flags, uint64_t request_id,
                 std::string_view meta, std::span<const uint8_t> data, Deadline deadline);

// Reads one frame. `max_frame` caps payload_len (EMSGSIZE beyond). With `eof_ok`, a peer that
// closes cleanly before the first byte gives ENODATA. A frame with data and no sink is EPROTO.
// With `crc_data`, on a frame with kFlagDataCrc, the data's CRC32C is computed piece by piece as it
// arrives (each piece while it is still in cache, while the sender keeps sending) into
// out->data_crc.
Status RecvFrame(int fd, uint32_t max_frame, Deadline deadline, bool eof_ok, const DataSink& sink,
                 ReceivedFrame* out, bool crc_data = false);

}  // namespace kvfs
