// A client of etcd's v3 API (Debian's etcd-server 3.4), the cluster's metadata engine: the
// namespace log, membership leases and their watches (docs/cluster.md).
//
// It speaks etcd's gRPC API (or, when asked, the v3 JSON gateway, `POST /v3/kv/txn`, ... over
// HTTP with libcurl): plain on loopback, TLS with a CA and client certificates when configured.
// Keys and values are raw bytes here (the gateway's base64 is the client's business), revisions
// are etcd's int64. Every call has a deadline; a client tries its endpoints in order and sticks
// to the first one that answers.
//
// Errors are Status values:
//   ECONNREFUSED / ETIMEDOUT / EHOSTUNREACH  no endpoint answered in time (etcd unreachable)
//   ESTALE (IsCompacted)                    the revision asked for was compacted away
//   ENOENT                                  the lease does not exist (expired or revoked)
//   E2BIG                                   more operations in one transaction than etcd allows
//   EPROTO                                  an answer that does not parse
//   EIO                                     any other error etcd reported (its message kept)
// Thread-safe: calls may be made from many threads at once (a small pool of connections).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvfs/status.h"

namespace kvfs::etcd {

struct TlsOptions {
  std::string ca_file;    // verifies the server; empty: the system's CA store
  std::string cert_file;  // client certificate (PEM), with key_file
  std::string key_file;
};

struct ClientOptions {
  // kGrpc: etcd's native API (the default). kJsonGateway: its v3 JSON gateway over HTTP/1.1 (an
  // etcd reachable only through an HTTP proxy); it costs etcd about twice the CPU per change.
  enum class Api { kGrpc, kJsonGateway };
  Api api = Api::kGrpc;
  // "http://127.0.0.1:2379" or "https://etcd-1:2379"; at least one.
  std::vector<std::string> endpoints;
  TlsOptions tls;
  std::chrono::milliseconds request_timeout{3000};
  std::chrono::milliseconds connect_timeout{1000};
};

struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;
};

struct RangeRequest {
  std::string key;
  std::string range_end;  // empty: just `key`; see PrefixEnd
  int64_t limit = 0;      // 0: no limit
  int64_t revision = 0;   // 0: the newest
  bool keys_only = false;
  bool count_only = false;
  bool descending = false;  // by key
};

struct RangeResponse {
  int64_t revision = 0;  // the store's revision when it answered
  std::vector<KeyValue> kvs;
  bool more = false;  // a limit cut the answer short
  int64_t count = 0;  // keys in the whole range
};

// One comparison of a transaction. With a range_end it must hold for every key in the range;
// an empty range compares as one key with every number 0 (so version == 0 means "no key").
struct Compare {
  enum class Target { kVersion, kCreateRevision, kModRevision, kValue };
  enum class Op { kEqual, kGreater, kLess, kNotEqual };
  std::string key;
  std::string range_end;
  Target target = Target::kVersion;
  Op op = Op::kEqual;
  int64_t number = 0;  // version or revision
  std::string value;   // kValue
};

struct TxnOp {
  enum class Kind { kPut, kDelete, kRange };
  Kind kind = Kind::kPut;
  std::string key;
  std::string value;      // kPut
  std::string range_end;  // kDelete, kRange
  int64_t lease = 0;      // kPut
  int64_t limit = 0;      // kRange
};

struct TxnRequest {
  std::vector<Compare> compare;
  std::vector<TxnOp> success;
  std::vector<TxnOp> failure;
};

struct TxnResponse {
  bool succeeded = false;
  int64_t revision = 0;  // the revision the transaction made (or saw, when it failed)
  // One entry per operation of the branch that ran; filled for kRange operations.
  std::vector<RangeResponse> ranges;
};

struct Event {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;  // a delete carries the key and its mod_revision only
};

struct WatchRequest {
  std::string key;
  std::string range_end;
  int64_t start_revision = 0;  // 0: from now
};

struct WatchResponse {
  int64_t revision = 0;
  // The etcd cluster that answered (0: not said). A wiped etcd is a new cluster with a new id.
  uint64_t cluster_id = 0;
  std::vector<Event> events;  // all events of one revision arrive in one response
  bool canceled = false;
  int64_t compact_revision = 0;  // set when start_revision was compacted (canceled too)
  std::string cancel_reason;
};

// The smallest key greater than every key that starts with `prefix` (etcd's prefix range_end).
std::string PrefixEnd(const std::string& prefix);

class Client {
 public:
  virtual ~Client() = default;
  virtual Result<RangeResponse> Range(const RangeRequest& req) = 0;
  virtual Result<TxnResponse> Txn(const TxnRequest& req) = 0;
  // Puts one key (a transaction without compares, through Txn); returns the new revision.
  virtual Result<int64_t> Put(const std::string& key, const std::string& value, int64_t lease = 0);
  virtual Result<int64_t> LeaseGrant(int64_t ttl_seconds) = 0;  // the lease id
  // One keep-alive; returns the lease's TTL in seconds. ENOENT when it expired.
  virtual Result<int64_t> LeaseKeepAlive(int64_t lease) = 0;
  virtual Status LeaseRevoke(int64_t lease) = 0;
  // Discards every revision below `revision` (tests, operators).
  virtual Status Compact(int64_t revision) = 0;
  // Streams changes until `on_response` returns false, `stop` becomes true (checked at least
  // every 100 ms), or the stream fails (then the error: the caller resumes from the last
  // revision it saw + 1). A canceled watch (compaction) is delivered, then the call returns
  // ESTALE. Blocks the calling thread.
  virtual Status Watch(const WatchRequest& req,
                       const std::function<bool(const WatchResponse&)>& on_response,
                       const std::atomic<bool>& stop) = 0;
  // The endpoint that answered last, for logs.
  virtual std::string endpoint() const = 0;
};

// Checks the options (endpoint syntax, readable TLS files); connects lazily.
Result<std::unique_ptr<Client>> MakeClient(const ClientOptions& options);

// True for a Status that says the revision was compacted away.
inline bool IsCompacted(const Status& st) { return st.err() == ESTALE; }
// True for a Status that says etcd could not be reached at all (as opposed to an answer).
bool IsUnreachable(const Status& st);

}  // namespace kvfs::etcd
