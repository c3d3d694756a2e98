// The v3 JSON gateway's encoding of etcd requests and answers (proto3 JSON: bytes as base64,
// int64 as strings, default values left out). Decoders are strict about types and base64 and
// return EPROTO for anything that does not parse; etcd's own errors come back as Status values
// (see kvfs/etcd.h).
#pragma once

#include <string>
#include <string_view>

#include "kvfs/etcd.h"

namespace kvfs::etcd::json {

std::string EncodeRange(const RangeRequest& req);
std::string EncodeTxn(const TxnRequest& req);
std::string EncodeWatchCreate(const WatchRequest& req);
std::string EncodeLeaseGrant(int64_t ttl_seconds);
std::string EncodeLeaseId(int64_t lease);
std::string EncodeCompact(int64_t revision);

Result<RangeResponse> DecodeRange(std::string_view body);
Result<TxnResponse> DecodeTxn(std::string_view body);
Result<int64_t> DecodeRevision(std::string_view body);  // any answer with a header
Result<int64_t> DecodeLeaseGrant(std::string_view body);
Result<int64_t> DecodeLeaseKeepAlive(std::string_view body);  // the TTL; ENOENT when expired
// One message of a watch stream ({"result": {...}} or {"error": {...}}).
Result<WatchResponse> DecodeWatch(std::string_view line);

// The Status for an HTTP error answer (gRPC status as JSON: {"error", "code", "message"}).
Status DecodeError(long http_status, std::string_view body);

}  // namespace kvfs::etcd::json
