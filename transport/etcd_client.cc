// etcd v3 JSON gateway over libcurl (kvfs/etcd.h), and MakeClient for both APIs. Unary calls
// reuse a small pool of curl easy handles (each keeps its connection alive); a watch runs on its
// own handle inside a curl multi handle so that it can be stopped within 100 ms however quiet
// the stream is.
#include <curl/curl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <mutex>
#include <string_view>

#include "etcd_grpc_client.h"
#include "etcd_json.h"
#include "kvfs/etcd.h"

namespace kvfs::etcd {
namespace {

std::once_flag curl_init_once;

size_t AppendBody(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

Status CurlStatus(CURLcode code, const std::string& endpoint, const char* errbuf) {
  std::string what = "etcd " + endpoint + ": " + (errbuf[0] ? errbuf : curl_easy_strerror(code));
  switch (code) {
    case CURLE_COULDNT_CONNECT:
      return Status::Error(ECONNREFUSED, what);
    case CURLE_OPERATION_TIMEDOUT:
      return Status::Error(ETIMEDOUT, what);
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
      return Status::Error(EHOSTUNREACH, what);
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CACERT_BADFILE:
      return Status::Error(EACCES, what);
    default:
      return Status::Error(ECONNRESET, what);
  }
}

class CurlClient final : public Client {
 public:
  explicit CurlClient(ClientOptions options) : options_(std::move(options)) {}
  ~CurlClient() override {
    for (CURL* h : idle_) curl_easy_cleanup(h);
  }

  Result<RangeResponse> Range(const RangeRequest& req) override {
    KVFS_ASSIGN_OR_RETURN(std::string body, Call("/v3/kv/range", json::EncodeRange(req)));
    return json::DecodeRange(body);
  }

  Result<TxnResponse> Txn(const TxnRequest& req) override {
    KVFS_ASSIGN_OR_RETURN(std::string body, Call("/v3/kv/txn", json::EncodeTxn(req)));
    return json::DecodeTxn(body);
  }

  Result<int64_t> LeaseGrant(int64_t ttl_seconds) override {
    KVFS_ASSIGN_OR_RETURN(std::string body,
                          Call("/v3/lease/grant", json::EncodeLeaseGrant(ttl_seconds)));
    return json::DecodeLeaseGrant(body);
  }

  Result<int64_t> LeaseKeepAlive(int64_t lease) override {
    KVFS_ASSIGN_OR_RETURN(std::string body,
                          Call("/v3/lease/keepalive", json::EncodeLeaseId(lease)));
    return json::DecodeLeaseKeepAlive(body);
  }

  Status LeaseRevoke(int64_t lease) override {
    return Call("/v3/lease/revoke", json::EncodeLeaseId(lease)).status();
  }

  Status Compact(int64_t revision) override {
    return Call("/v3/kv/compaction", json::EncodeCompact(revision)).status();
  }

  Status Watch(const WatchRequest& req,
               const std::function<bool(const WatchResponse&)>& on_response,
               const std::atomic<bool>& stop) override;

  std::string endpoint() const override {
    return options_.endpoints[current_.load() % options_.endpoints.size()];
  }

 private:
  CURL* Acquire() {
    {
      std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        CURL* h = idle_.back();
        idle_.pop_back();
        return h;
      }
    }
    return curl_easy_init();
  }
  void ReleaseHandle(CURL* h, bool reusable) {
    if (h == nullptr) return;
    std::lock_guard lock(mu_);
    if (reusable && idle_.size() < 16) {
      idle_.push_back(h);
    } else {
      curl_easy_cleanup(h);
    }
  }

  // Common options of every request against `endpoint`.
  void Setup(CURL* h, const std::string& url, const std::string& body, std::string* out,
             curl_slist* headers, char* errbuf) const {
    curl_easy_reset(h);
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, AppendBody);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                     static_cast<long>(options_.connect_timeout.count()));
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 2L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 1L);
    curl_easy_setopt(h, CURLOPT_PROXY, "");  // never through an http_proxy from the environment
    if (!options_.tls.ca_file.empty())
      curl_easy_setopt(h, CURLOPT_CAINFO, options_.tls.ca_file.c_str());
    if (!options_.tls.cert_file.empty()) {
      curl_easy_setopt(h, CURLOPT_SSLCERT, options_.tls.cert_file.c_str());
      curl_easy_setopt(h, CURLOPT_SSLKEY, options_.tls.key_file.c_str());
    }
  }

  // POSTs `body` to `path`, trying the endpoints from the last one that answered. An endpoint
  // that cannot be reached moves on to the next; an answer (even an error) ends the call.
  Result<std::string> Call(const char* path, const std::string& body) {
    Status last;
    const size_t n = options_.endpoints.size();
    const size_t first = current_.load();
    for (size_t k = 0; k < n; ++k) {
      const size_t idx = (first + k) % n;
      const std::string& ep = options_.endpoints[idx];
      CURL* h = Acquire();
      if (h == nullptr) return Status::Error(ENOMEM, "curl_easy_init failed");
      std::string out;
      char errbuf[CURL_ERROR_SIZE] = "";
      curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
      Setup(h, ep + path, body, &out, headers, errbuf);
      curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, static_cast<long>(options_.request_timeout.count()));
      const CURLcode code = curl_easy_perform(h);
      long http = 0;
      curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &http);
      curl_slist_free_all(headers);
      ReleaseHandle(h, code == CURLE_OK);
      if (code != CURLE_OK) {
        last = CurlStatus(code, ep, errbuf);
        continue;
      }
      if (idx != first) {
        current_.store(idx);
        spdlog::info("etcd: now using endpoint {}", ep);
      }
      if (http != 200) return json::DecodeError(http, out);
      return out;
    }
    return last;
  }

  const ClientOptions options_;
  std::atomic<size_t> current_{0};
  std::mutex mu_;
  std::vector<CURL*> idle_;
};

// State of one watch stream: the bytes not yet split into lines, and the caller's callback.
struct WatchStream {
  std::string pending;
  const std::function<bool(const WatchResponse&)>* on_response = nullptr;
  Status error;       // a message that did not decode, or etcd's error
  bool done = false;  // the callback said stop, or the watch was canceled
};

size_t OnWatchBytes(char* data, size_t size, size_t n, void* user) {
  auto* w = static_cast<WatchStream*>(user);
  w->pending.append(data, size * n);
  size_t start = 0;
  for (;;) {
    const size_t nl = w->pending.find('\n', start);
    if (nl == std::string::npos) break;
    std::string_view line(w->pending.data() + start, nl - start);
    start = nl + 1;
    if (line.find_first_not_of(" \r\t") == std::string_view::npos) continue;
    Result<WatchResponse> r = json::DecodeWatch(line);
    if (!r.ok()) {
      w->error = r.status();
      w->done = true;
      return 0;  // aborts the transfer
    }
    if (!(*w->on_response)(*r)) {
      w->done = true;
      return 0;
    }
    if (r->canceled) {
      w->error = r->compact_revision != 0
                     ? Status::Error(ESTALE, "etcd watch: revision compacted (now at " +
                                                 std::to_string(r->compact_revision) + ")")
                     : Status::IoError("etcd watch canceled: " + r->cancel_reason);
      w->done = true;
      return 0;
    }
  }
  w->pending.erase(0, start);
  return size * n;
}

Status CurlClient::Watch(const WatchRequest& req,
                         const std::function<bool(const WatchResponse&)>& on_response,
                         const std::atomic<bool>& stop) {
  const std::string ep = endpoint();
  const std::string body = json::EncodeWatchCreate(req);
  WatchStream stream;
  stream.on_response = &on_response;
  CURL* h = curl_easy_init();
  CURLM* m = curl_multi_init();
  if (h == nullptr || m == nullptr) {
    if (h) curl_easy_cleanup(h);
    if (m) curl_multi_cleanup(m);
    return Status::Error(ENOMEM, "curl init failed");
  }
  char errbuf[CURL_ERROR_SIZE] = "";
  std::string unused;
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  Setup(h, ep + "/v3/watch", body, &unused, headers, errbuf);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, OnWatchBytes);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &stream);
  curl_multi_add_handle(m, h);
  Status result;
  for (;;) {
    int running = 0;
    CURLMcode mc = curl_multi_perform(m, &running);
    if (mc != CURLM_OK) {
      result = Status::IoError(std::string("curl multi: ") + curl_multi_strerror(mc));
      break;
    }
    int queued = 0;
    bool finished = false;
    while (CURLMsg* msg = curl_multi_info_read(m, &queued)) {
      if (msg->msg != CURLMSG_DONE) continue;
      finished = true;
      const CURLcode code = msg->data.result;
      long http = 0;
      curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &http);
      if (stream.done) {
        result = stream.error;
      } else if (code != CURLE_OK) {
        result = CurlStatus(code, ep, errbuf);
      } else if (http != 200) {
        result = json::DecodeError(http, stream.pending);
      } else {
        result = Status::Error(ECONNRESET, "etcd " + ep + ": watch stream ended");
      }
    }
    if (finished || running == 0) {
      if (!finished && result.ok()) result = Status::Error(ECONNRESET, "etcd watch ended");
      break;
    }
    if (stop.load()) break;  // result stays OK: the caller asked
    curl_multi_poll(m, nullptr, 0, 100, nullptr);
  }
  curl_multi_remove_handle(m, h);
  curl_easy_cleanup(h);
  curl_multi_cleanup(m);
  curl_slist_free_all(headers);
  return result;
}

}  // namespace

Result<int64_t> Client::Put(const std::string& key, const std::string& value, int64_t lease) {
  TxnRequest txn;
  txn.success.push_back({TxnOp::Kind::kPut, key, value, "", lease, 0});
  KVFS_ASSIGN_OR_RETURN(TxnResponse r, Txn(txn));
  return r.revision;
}

std::string PrefixEnd(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    auto& c = reinterpret_cast<unsigned char&>(end.back());
    if (c < 0xff) {
      ++c;
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

bool IsUnreachable(const Status& st) {
  switch (st.err()) {
    case ECONNREFUSED:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ECONNRESET:
      return true;
  }
  return false;
}

Result<std::unique_ptr<Client>> MakeClient(const ClientOptions& options) {
  if (options.endpoints.empty()) return Status::Invalid("etcd: no endpoint given");
  for (const std::string& ep : options.endpoints) {
    const bool http = ep.rfind("http://", 0) == 0, https = ep.rfind("https://", 0) == 0;
    if (!http && !https)
      return Status::Invalid("etcd endpoint '" + ep + "' must start with http:// or https://");
    if (ep.size() <= (http ? 7u : 8u))
      return Status::Invalid("etcd endpoint '" + ep + "' has no host");
    if (ep.back() == '/') return Status::Invalid("etcd endpoint '" + ep + "' ends with '/'");
  }
  const TlsOptions& tls = options.tls;
  if (tls.cert_file.empty() != tls.key_file.empty())
    return Status::Invalid(
        "etcd TLS: a client certificate needs its key, and a key its certificate");
  for (const std::string* f : {&tls.ca_file, &tls.cert_file, &tls.key_file}) {
    if (!f->empty() && access(f->c_str(), R_OK) != 0)
      return Status::Error(errno, "etcd TLS: cannot read " + *f);
  }
  if (options.api == ClientOptions::Api::kGrpc) return MakeGrpcClient(options);
  std::call_once(curl_init_once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  return std::unique_ptr<Client>(new CurlClient(options));
}

}  // namespace kvfs::etcd
