// etcd's v3 gRPC API (kvfs/etcd.h). One channel per endpoint; unary calls try the endpoints
// from the last one that answered, as the JSON client does. A watch is one bidirectional stream
// whose context a helper cancels within 100 ms of `stop`; a lease keep-alive is one short
// stream (one request, one answer). gRPC's own retries are off: the callers decide.
#include "etcd_grpc_client.h"

#include <grpc/support/log.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "etcd_errors.h"
#include "etcd_rpc.grpc.pb.h"

namespace kvfs::etcd {
namespace {

namespace pb = ::etcdserverpb;

Status Bad(const char* what) {
  return Status::Error(EPROTO, std::string("etcd answer does not parse: ") + what);
}

// A gRPC failure as kvfs/etcd.h's errno. Not reaching etcd (UNAVAILABLE before it answered,
// the deadline, a reset stream) is ECONNREFUSED / ETIMEDOUT / ECONNRESET, which IsUnreachable
// knows; etcd's own refusals keep the mapping the JSON gateway's error bodies get.
Status FromGrpc(const grpc::Status& s, const std::string& endpoint) {
  const std::string what = "etcd " + endpoint + ": " + s.error_message();
  switch (s.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      if (s.error_message().find("etcdserver:") == std::string::npos)
        return Status::Error(ECONNREFUSED, what);
      break;  // etcd answered: no leader, request timed out
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return Status::Error(ETIMEDOUT, what);
    case grpc::StatusCode::CANCELLED:
      return Status::Error(ECONNRESET, what);
    default:
      break;
  }
  return Status::Error(GrpcToErrno(static_cast<int64_t>(s.error_code()), s.error_message()), what);
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::Error(errno ? errno : EIO, "etcd TLS: cannot read " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// "https://host:port/..." -> "host:port" (the scheme's port when none is given).
std::string Target(const std::string& url, bool* tls) {
  *tls = url.rfind("https://", 0) == 0;
  std::string rest = url.substr(*tls ? 8 : 7);
  if (size_t slash = rest.find('/'); slash != std::string::npos) rest.resize(slash);
  const size_t bracket = rest.rfind(']');
  const size_t colon = rest.rfind(':');
  if (colon == std::string::npos || (bracket != std::string::npos && colon < bracket))
    rest += *tls ? ":443" : ":80";
  return rest;
}

void ToKeyValue(const pb::KeyValue& in, KeyValue* out) {
  out->key = in.key();
  out->value = in.value();
  out->create_revision = in.create_revision();
  out->mod_revision = in.mod_revision();
  out->version = in.version();
  out->lease = in.lease();
}

Result<RangeResponse> ToRange(const pb::RangeResponse& in) {
  if (!in.has_header()) return Bad("range without header");
  RangeResponse r;
  r.revision = in.header().revision();
  r.more = in.more();
  r.count = in.count();
  r.kvs.resize(static_cast<size_t>(in.kvs_size()));
  for (int i = 0; i < in.kvs_size(); ++i) ToKeyValue(in.kvs(i), &r.kvs[static_cast<size_t>(i)]);
  return r;
}

void FillRange(const RangeRequest& req, pb::RangeRequest* r) {
  r->set_key(req.key);
  r->set_range_end(req.range_end);
  r->set_limit(req.limit);
  r->set_revision(req.revision);
  r->set_keys_only(req.keys_only);
  r->set_count_only(req.count_only);
  if (req.descending) {
    r->set_sort_order(pb::RangeRequest::DESCEND);
    r->set_sort_target(pb::RangeRequest::KEY);
  }
}

void FillOp(const TxnOp& op, pb::RequestOp* out) {
  switch (op.kind) {
    case TxnOp::Kind::kPut: {
      pb::PutRequest* p = out->mutable_request_put();
      p->set_key(op.key);
      p->set_value(op.value);
      p->set_lease(op.lease);
      return;
    }
    case TxnOp::Kind::kDelete: {
      pb::DeleteRangeRequest* d = out->mutable_request_delete_range();
      d->set_key(op.key);
      d->set_range_end(op.range_end);
      return;
    }
    case TxnOp::Kind::kRange: {
      pb::RangeRequest* r = out->mutable_request_range();
      r->set_key(op.key);
      r->set_range_end(op.range_end);
      r->set_limit(op.limit);
      return;
    }
  }
}

void FillCompare(const Compare& c, pb::Compare* out) {
  out->set_key(c.key);
  out->set_range_end(c.range_end);
  switch (c.op) {
    case Compare::Op::kEqual:
      out->set_result(pb::Compare::EQUAL);
      break;
    case Compare::Op::kGreater:
      out->set_result(pb::Compare::GREATER);
      break;
    case Compare::Op::kLess:
      out->set_result(pb::Compare::LESS);
      break;
    case Compare::Op::kNotEqual:
      out->set_result(pb::Compare::NOT_EQUAL);
      break;
  }
  switch (c.target) {
    case Compare::Target::kVersion:
      out->set_target(pb::Compare::VERSION);
      out->set_version(c.number);
      break;
    case Compare::Target::kCreateRevision:
      out->set_target(pb::Compare::CREATE);
      out->set_create_revision(c.number);
      break;
    case Compare::Target::kModRevision:
      out->set_target(pb::Compare::MOD);
      out->set_mod_revision(c.number);
      break;
    case Compare::Target::kValue:
      out->set_target(pb::Compare::VALUE);
      out->set_value(c.value);
      break;
  }
}

Result<WatchResponse> ToWatch(const pb::WatchResponse& in) {
  if (!in.has_header()) return Bad("watch message without header");
  WatchResponse w;
  w.revision = in.header().revision();
  w.cluster_id = in.header().cluster_id();
  w.canceled = in.canceled();
  w.compact_revision = in.compact_revision();
  w.cancel_reason = in.cancel_reason();
  w.events.resize(static_cast<size_t>(in.events_size()));
  for (int i = 0; i < in.events_size(); ++i) {
    const pb::Event& ev = in.events(i);
    Event& out = w.events[static_cast<size_t>(i)];
    if (ev.type() == pb::Event::DELETE) {
      out.type = Event::Type::kDelete;
    } else if (ev.type() != pb::Event::PUT) {
      return Bad("event type");
    }
    if (!ev.has_kv()) return Bad("event without kv");
    ToKeyValue(ev.kv(), &out.kv);
  }
  return w;
}

// gRPC's own log lines (a TLS handshake etcd refused, ...) into kvfs's log, not onto stderr.
void LogToSpdlog(gpr_log_func_args* args) {
  if (args->severity == GPR_LOG_SEVERITY_ERROR) {
    spdlog::warn("grpc: {}", args->message);
  } else {
    spdlog::debug("grpc: {}", args->message);
  }
}

struct Endpoint {
  std::string url;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Watch::Stub> watch;
  std::unique_ptr<pb::Lease::Stub> lease;
};

class GrpcClient final : public Client {
 public:
  GrpcClient(ClientOptions options, std::shared_ptr<grpc::ChannelCredentials> tls_creds)
      : options_(std::move(options)) {
    grpc::ChannelArguments args;
    // Back on etcd within a second of its return: gRPC's default backoff grows to 2 minutes.
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    args.SetInt(GRPC_ARG_ENABLE_RETRIES, 0);
    args.SetMaxReceiveMessageSize(-1);  // a page of a re-sync may exceed gRPC's 4 MiB default
    args.SetMaxSendMessageSize(-1);
    for (const std::string& url : options_.endpoints) {
      bool tls = false;
      const std::string target = Target(url, &tls);
      Endpoint e;
      e.url = url;
      e.channel = grpc::CreateCustomChannel(
          target, tls ? tls_creds : grpc::InsecureChannelCredentials(), args);
      e.kv = pb::KV::NewStub(e.channel);
      e.watch = pb::Watch::NewStub(e.channel);
      e.lease = pb::Lease::NewStub(e.channel);
      endpoints_.push_back(std::move(e));
    }
    reconnector_ = std::thread([this] { Reconnect(); });
  }

  ~GrpcClient() override {
    {
      std::lock_guard lock(reconnect_mu_);
      closing_ = true;
    }
    reconnect_cv_.notify_all();
    reconnector_.join();
  }

  Result<RangeResponse> Range(const RangeRequest& req) override {
    pb::RangeRequest r;
    FillRange(req, &r);
    pb::RangeResponse out;
    KVFS_RETURN_IF_ERROR(
        Call([&](Endpoint& e, grpc::ClientContext* ctx) { return e.kv->Range(ctx, r, &out); }));
    return ToRange(out);
  }

  Result<TxnResponse> Txn(const TxnRequest& req) override {
    pb::TxnRequest t;
    for (const Compare& c : req.compare) FillCompare(c, t.add_compare());
    for (const TxnOp& op : req.success) FillOp(op, t.add_success());
    for (const TxnOp& op : req.failure) FillOp(op, t.add_failure());
    pb::TxnResponse out;
    KVFS_RETURN_IF_ERROR(
        Call([&](Endpoint& e, grpc::ClientContext* ctx) { return e.kv->Txn(ctx, t, &out); }));
    if (!out.has_header()) return Bad("transaction without header");
    TxnResponse r;
    r.revision = out.header().revision();
    r.succeeded = out.succeeded();
    for (const pb::ResponseOp& op : out.responses()) {
      RangeResponse range;
      if (op.has_response_range()) {
        KVFS_ASSIGN_OR_RETURN(range, ToRange(op.response_range()));
      }
      r.ranges.push_back(std::move(range));
    }
    return r;
  }

  Result<int64_t> LeaseGrant(int64_t ttl_seconds) override {
    pb::LeaseGrantRequest req;
    req.set_ttl(ttl_seconds);
    pb::LeaseGrantResponse out;
    KVFS_RETURN_IF_ERROR(Call([&](Endpoint& e, grpc::ClientContext* ctx) {
      return e.lease->LeaseGrant(ctx, req, &out);
    }));
    if (out.id() == 0) return Bad("lease ID");
    if (!out.error().empty()) return Status::IoError("etcd: " + out.error());
    return out.id();
  }

  Result<int64_t> LeaseKeepAlive(int64_t lease) override {
    pb::LeaseKeepAliveRequest req;
    req.set_id(lease);
    pb::LeaseKeepAliveResponse out;
    KVFS_RETURN_IF_ERROR(Call([&](Endpoint& e, grpc::ClientContext* ctx) {
      auto stream = e.lease->LeaseKeepAlive(ctx);
      if (stream->Write(req) && stream->Read(&out)) {
        ctx->TryCancel();  // one answer is all this call wants
        (void)stream->Finish();
        return grpc::Status::OK;
      }
      grpc::Status st = stream->Finish();
      return st.ok() ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "keep-alive stream ended") : st;
    }));
    if (out.ttl() <= 0) return Status::NotFound("etcd: lease expired");
    return out.ttl();
  }

  Status LeaseRevoke(int64_t lease) override {
    pb::LeaseRevokeRequest req;
    req.set_id(lease);
    pb::LeaseRevokeResponse out;
    return Call([&](Endpoint& e, grpc::ClientContext* ctx) {
      return e.lease->LeaseRevoke(ctx, req, &out);
    });
  }

  Status Compact(int64_t revision) override {
    // Not physical: see json::EncodeCompact.
    pb::CompactionRequest req;
    req.set_revision(revision);
    req.set_physical(false);
    pb::CompactionResponse out;
    return Call(
        [&](Endpoint& e, grpc::ClientContext* ctx) { return e.kv->Compact(ctx, req, &out); });
  }

  Status Watch(const WatchRequest& req,
               const std::function<bool(const WatchResponse&)>& on_response,
               const std::atomic<bool>& stop) override;

  std::string endpoint() const override {
    return options_.endpoints[current_.load() % options_.endpoints.size()];
  }

 private:
  // Runs `rpc` against the endpoints from the last one that answered. One that cannot be
  // reached moves on to the next; an answer (even an error) ends the call.
  template <typename Rpc>
  Status Call(Rpc&& rpc) {
    Status last;
    const size_t n = endpoints_.size();
    const size_t first = current_.load();
    for (size_t k = 0; k < n; ++k) {
      const size_t idx = (first + k) % n;
      Endpoint& e = endpoints_[idx];
      const auto deadline = std::chrono::system_clock::now() + options_.request_timeout;
      Status st = Connected(e, deadline);
      if (st.ok()) {
        grpc::ClientContext ctx;
        ctx.set_deadline(deadline);
        const grpc::Status s = rpc(e, &ctx);
        if (!s.ok()) st = FromGrpc(s, e.url);
      }
      if (!st.ok() && IsUnreachable(st)) {
        last = std::move(st);
        continue;
      }
      if (idx != first) {
        current_.store(idx);
        spdlog::info("etcd: now using endpoint {}", e.url);
      }
      return st;
    }
    return last;
  }

  // Waits, within the connect timeout, for the endpoint's connection attempt, and fails at
  // once on an endpoint whose last attempt failed (gRPC keeps such a channel in
  // TRANSIENT_FAILURE while it tries again after its backoff): a down etcd, or a dead one of
  // several endpoints, costs a refused connection per call, not the connect timeout.
  Status Connected(Endpoint& e, std::chrono::system_clock::time_point deadline) {
    const auto until =
        std::min(deadline, std::chrono::system_clock::now() +
                               std::max(options_.connect_timeout, std::chrono::milliseconds(1)));
    for (;;) {
      const grpc_connectivity_state state = e.channel->GetState(/*try_to_connect=*/true);
      if (state == GRPC_CHANNEL_READY) return Status::Ok();
      if (state == GRPC_CHANNEL_TRANSIENT_FAILURE || state == GRPC_CHANNEL_SHUTDOWN) {
        WakeReconnector();  // it waits on the channel's next attempt
        return Status::Error(ECONNREFUSED, "etcd " + e.url + ": cannot connect");
      }
      if (!e.channel->WaitForStateChange(state, until)) {
        WakeReconnector();  // it goes on waiting on the attempt
        return Status::Error(ETIMEDOUT, "etcd " + e.url + ": cannot connect");
      }
    }
  }

  void WakeReconnector() {
    // Taken and released: the reconnector is then waiting (and woken) or has yet to look at
    // the channels' states (and sees this one's).
    { std::lock_guard lock(reconnect_mu_); }
    reconnect_cv_.notify_all();
  }

  // Synchronous gRPC makes progress on a connection only while some thread waits on its
  // channel (otherwise only through its backup poller, every 5 s): without this thread a
  // client whose calls failed while etcd was down would read the handshake of its next
  // attempt seconds late, and never get back to etcd in time. It waits on every channel that
  // is connecting or backing off, and sleeps while none is.
  void Reconnect() {
    std::unique_lock lock(reconnect_mu_);
    while (!closing_) {
      bool waited = false;
      for (Endpoint& e : endpoints_) {
        const grpc_connectivity_state state = e.channel->GetState(/*try_to_connect=*/false);
        if (state != GRPC_CHANNEL_CONNECTING && state != GRPC_CHANNEL_TRANSIENT_FAILURE) continue;
        lock.unlock();
        (void)e.channel->WaitForStateChange(
            state, std::chrono::system_clock::now() + std::chrono::milliseconds(100));
        lock.lock();
        waited = true;
        if (closing_) return;
      }
      // A call that finds a channel failing wakes it; the timeout is only a backstop.
      if (!waited) reconnect_cv_.wait_for(lock, std::chrono::seconds(1));
    }
  }

  const ClientOptions options_;
  std::vector<Endpoint> endpoints_;
  std::atomic<size_t> current_{0};
  std::mutex reconnect_mu_;
  std::condition_variable reconnect_cv_;
  bool closing_ = false;
  std::thread reconnector_;  // Reconnect(): started last, joined first
};

Status GrpcClient::Watch(const WatchRequest& req,
                         const std::function<bool(const WatchResponse&)>& on_response,
                         const std::atomic<bool>& stop) {
  Endpoint& e = endpoints_[current_.load() % endpoints_.size()];
  KVFS_RETURN_IF_ERROR(Connected(e, std::chrono::system_clock::now() + options_.request_timeout));
  grpc::ClientContext ctx;
  auto stream = e.watch->Watch(&ctx);
  // `stop` is a flag, not an event: look at it every 100 ms and cancel the stream when set
  // (a quiet watch would otherwise block in Read for as long as etcd has nothing to say).
  std::mutex mu;
  std::condition_variable cv;
  bool over = false;
  std::thread canceller([&] {
    std::unique_lock lock(mu);
    while (!over) {
      if (stop.load()) {
        ctx.TryCancel();
        return;
      }
      cv.wait_for(lock, std::chrono::milliseconds(100));
    }
  });
  pb::WatchRequest create;
  pb::WatchCreateRequest* c = create.mutable_create_request();
  c->set_key(req.key);
  c->set_range_end(req.range_end);
  c->set_start_revision(req.start_revision);
  Status result;
  bool decided = false;  // the callback stopped, the watch was canceled, or garbage came
  if (stream->Write(create)) {
    pb::WatchResponse in;
    while (stream->Read(&in)) {
      Result<WatchResponse> w = ToWatch(in);
      if (!w.ok()) {
        result = w.status();
        decided = true;
        break;
      }
      if (!on_response(*w)) {
        decided = true;
        break;
      }
      if (w->canceled) {
        result = w->compact_revision != 0
                     ? Status::Error(ESTALE, "etcd watch: revision compacted (now at " +
                                                 std::to_string(w->compact_revision) + ")")
                     : Status::IoError("etcd watch canceled: " + w->cancel_reason);
        decided = true;
        break;
      }
    }
  }
  {
    std::lock_guard lock(mu);
    over = true;
  }
  cv.notify_all();
  canceller.join();
  if (decided) ctx.TryCancel();  // etcd may still be streaming
  const grpc::Status end = stream->Finish();
  if (decided) return result;
  if (stop.load()) return Status::Ok();  // the caller asked
  if (!end.ok()) return FromGrpc(end, e.url);
  return Status::Error(ECONNRESET, "etcd " + e.url + ": watch stream ended");
}

}  // namespace

std::unique_ptr<Client> MakeGrpcClient(const ClientOptions& options) {
  static std::once_flag log_once;
  std::call_once(log_once, [] { gpr_set_log_function(LogToSpdlog); });
  std::shared_ptr<grpc::ChannelCredentials> tls;
  bool any_tls = false;
  for (const std::string& url : options.endpoints) any_tls |= url.rfind("https://", 0) == 0;
  if (any_tls) {
    grpc::SslCredentialsOptions ssl;
    // MakeClient checked that the files are readable; a read failing now leaves the field
    // empty, which fails the handshake with a clear error instead of trusting anything.
    // No CA given: the system's store, as libcurl uses (gRPC would use its own bundle).
    const std::string ca =
        options.tls.ca_file.empty() ? "/etc/ssl/certs/ca-certificates.crt" : options.tls.ca_file;
    if (auto s = ReadFile(ca); s.ok()) ssl.pem_root_certs = std::move(*s);
    if (!options.tls.cert_file.empty()) {
      if (auto s = ReadFile(options.tls.cert_file); s.ok()) ssl.pem_cert_chain = std::move(*s);
      if (auto s = ReadFile(options.tls.key_file); s.ok()) ssl.pem_private_key = std::move(*s);
    }
    tls = grpc::SslCredentials(ssl);
  }
  return std::make_unique<GrpcClient>(options, std::move(tls));
}

}  // namespace kvfs::etcd
