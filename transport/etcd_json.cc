#include "etcd_json.h"

#include <charconv>
#include <nlohmann/json.hpp>

#include "base64.h"
#include "etcd_errors.h"

namespace kvfs::etcd::json {
namespace {

using nlohmann::json;

Status Bad(const std::string& what) {
  return Status::Error(EPROTO, "etcd answer does not parse: " + what);
}

std::string B64(const std::string& s) { return Base64Encode(s); }

// proto3 JSON writes int64 as a string; accept a number too.
bool GetInt(const json& obj, const char* field, int64_t* out) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) {
    *out = 0;
    return true;
  }
  if (it->is_number_integer()) {
    *out = it->get<int64_t>();
    return true;
  }
  if (!it->is_string()) return false;
  const std::string& s = it->get_ref<const std::string&>();
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

bool GetBool(const json& obj, const char* field, bool* out) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) {
    *out = false;
    return true;
  }
  if (!it->is_boolean()) return false;
  *out = it->get<bool>();
  return true;
}

bool GetBytes(const json& obj, const char* field, std::string* out) {
  auto it = obj.find(field);
  if (it == obj.end() || it->is_null()) {
    out->clear();
    return true;
  }
  if (!it->is_string()) return false;
  auto decoded = Base64Decode(it->get_ref<const std::string&>());
  if (!decoded) return false;
  *out = std::move(*decoded);
  return true;
}

Result<json> Parse(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Bad("not a JSON object");
  return j;
}

Result<int64_t> HeaderRevision(const json& j) {
  auto h = j.find("header");
  if (h == j.end() || !h->is_object()) return int64_t{0};
  int64_t rev;
  if (!GetInt(*h, "revision", &rev)) return Bad("header.revision");
  return rev;
}

// header.cluster_id, a uint64 in a string (0 when absent or unreadable: it only detects an etcd
// that lost its data, and a watch must not fail for it).
uint64_t HeaderClusterId(const json& j) {
  auto h = j.find("header");
  if (h == j.end() || !h->is_object()) return 0;
  auto it = h->find("cluster_id");
  if (it == h->end()) return 0;
  if (it->is_number_unsigned()) return it->get<uint64_t>();
  if (!it->is_string()) return 0;
  const std::string& s = it->get_ref<const std::string&>();
  uint64_t id = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), id);
  return ec == std::errc() && p == s.data() + s.size() ? id : 0;
}

Status DecodeKv(const json& j, KeyValue* kv) {
  if (!j.is_object()) return Bad("kv is not an object");
  if (!GetBytes(j, "key", &kv->key) || !GetBytes(j, "value", &kv->value) ||
      !GetInt(j, "create_revision", &kv->create_revision) ||
      !GetInt(j, "mod_revision", &kv->mod_revision) || !GetInt(j, "version", &kv->version) ||
      !GetInt(j, "lease", &kv->lease)) {
    return Bad("kv fields");
  }
  return Status::Ok();
}

Result<RangeResponse> RangeFrom(const json& j) {
  RangeResponse r;
  KVFS_ASSIGN_OR_RETURN(r.revision, HeaderRevision(j));
  if (!GetBool(j, "more", &r.more) || !GetInt(j, "count", &r.count)) return Bad("range fields");
  if (auto kvs = j.find("kvs"); kvs != j.end() && !kvs->is_null()) {
    if (!kvs->is_array()) return Bad("kvs is not an array");
    r.kvs.resize(kvs->size());
    for (size_t i = 0; i < kvs->size(); ++i) KVFS_RETURN_IF_ERROR(DecodeKv((*kvs)[i], &r.kvs[i]));
  }
  return r;
}

const char* TargetName(Compare::Target t) {
  switch (t) {
    case Compare::Target::kVersion:
      return "VERSION";
    case Compare::Target::kCreateRevision:
      return "CREATE";
    case Compare::Target::kModRevision:
      return "MOD";
    case Compare::Target::kValue:
      return "VALUE";
  }
  return "VERSION";
}

const char* OpName(Compare::Op op) {
  switch (op) {
    case Compare::Op::kEqual:
      return "EQUAL";
    case Compare::Op::kGreater:
      return "GREATER";
    case Compare::Op::kLess:
      return "LESS";
    case Compare::Op::kNotEqual:
      return "NOT_EQUAL";
  }
  return "EQUAL";
}

json EncodeOp(const TxnOp& op) {
  json body = json::object();
  body["key"] = B64(op.key);
  switch (op.kind) {
    case TxnOp::Kind::kPut:
      body["value"] = B64(op.value);
      if (op.lease != 0) body["lease"] = std::to_string(op.lease);
      return json{{"request_put", body}};
    case TxnOp::Kind::kDelete:
      if (!op.range_end.empty()) body["range_end"] = B64(op.range_end);
      return json{{"request_delete_range", body}};
    case TxnOp::Kind::kRange:
      if (!op.range_end.empty()) body["range_end"] = B64(op.range_end);
      if (op.limit != 0) body["limit"] = std::to_string(op.limit);
      return json{{"request_range", body}};
  }
  return body;
}

}  // namespace

std::string EncodeRange(const RangeRequest& req) {
  json j = json::object();
  j["key"] = B64(req.key);
  if (!req.range_end.empty()) j["range_end"] = B64(req.range_end);
  if (req.limit != 0) j["limit"] = std::to_string(req.limit);
  if (req.revision != 0) j["revision"] = std::to_string(req.revision);
  if (req.keys_only) j["keys_only"] = true;
  if (req.count_only) j["count_only"] = true;
  if (req.descending) {
    j["sort_order"] = "DESCEND";
    j["sort_target"] = "KEY";
  }
  return j.dump();
}

std::string EncodeTxn(const TxnRequest& req) {
  json compare = json::array();
  for (const Compare& c : req.compare) {
    json x = json::object();
    x["key"] = B64(c.key);
    if (!c.range_end.empty()) x["range_end"] = B64(c.range_end);
    x["target"] = TargetName(c.target);
    x["result"] = OpName(c.op);
    switch (c.target) {
      case Compare::Target::kVersion:
        x["version"] = std::to_string(c.number);
        break;
      case Compare::Target::kCreateRevision:
        x["create_revision"] = std::to_string(c.number);
        break;
      case Compare::Target::kModRevision:
        x["mod_revision"] = std::to_string(c.number);
        break;
      case Compare::Target::kValue:
        x["value"] = B64(c.value);
        break;
    }
    compare.push_back(std::move(x));
  }
  json success = json::array(), failure = json::array();
  for (const TxnOp& op : req.success) success.push_back(EncodeOp(op));
  for (const TxnOp& op : req.failure) failure.push_back(EncodeOp(op));
  json j = json::object();
  j["compare"] = std::move(compare);
  j["success"] = std::move(success);
  j["failure"] = std::move(failure);
  return j.dump();
}

std::string EncodeWatchCreate(const WatchRequest& req) {
  json c = json::object();
  c["key"] = B64(req.key);
  if (!req.range_end.empty()) c["range_end"] = B64(req.range_end);
  if (req.start_revision != 0) c["start_revision"] = std::to_string(req.start_revision);
  return json{{"create_request", c}}.dump();
}

std::string EncodeLeaseGrant(int64_t ttl_seconds) {
  return json{{"TTL", std::to_string(ttl_seconds)}}.dump();
}

std::string EncodeLeaseId(int64_t lease) { return json{{"ID", std::to_string(lease)}}.dump(); }

std::string EncodeCompact(int64_t revision) {
  // Not physical: etcd refuses reads below the revision as soon as it takes the request, and
  // removing the old versions from its database can take longer than a request may (seconds
  // after 150,000 names were written), which would fail every compaction and hold up the
  // caller's thread.
  return json{{"revision", std::to_string(revision)}, {"physical", false}}.dump();
}

Result<RangeResponse> DecodeRange(std::string_view body) {
  KVFS_ASSIGN_OR_RETURN(json j, Parse(body));
  return RangeFrom(j);
}

Result<TxnResponse> DecodeTxn(std::string_view body) {
  KVFS_ASSIGN_OR_RETURN(json j, Parse(body));
  TxnResponse r;
  KVFS_ASSIGN_OR_RETURN(r.revision, HeaderRevision(j));
  if (!GetBool(j, "succeeded", &r.succeeded)) return Bad("succeeded");
  if (auto resp = j.find("responses"); resp != j.end() && !resp->is_null()) {
    if (!resp->is_array()) return Bad("responses is not an array");
    for (const json& one : *resp) {
      RangeResponse range;
      if (auto rr = one.find("response_range"); rr != one.end() && rr->is_object()) {
        KVFS_ASSIGN_OR_RETURN(range, RangeFrom(*rr));
      }
      r.ranges.push_back(std::move(range));
    }
  }
  return r;
}

Result<int64_t> DecodeRevision(std::string_view body) {
  KVFS_ASSIGN_OR_RETURN(json j, Parse(body));
  return HeaderRevision(j);
}

Result<int64_t> DecodeLeaseGrant(std::string_view body) {
  KVFS_ASSIGN_OR_RETURN(json j, Parse(body));
  int64_t id = 0;
  if (!GetInt(j, "ID", &id) || id == 0) return Bad("lease ID");
  if (auto e = j.find("error"); e != j.end() && e->is_string() && !e->get<std::string>().empty())
    return Status::IoError("etcd: " + e->get<std::string>());
  return id;
}

namespace {

// A stream message without "result": etcd's error object as a Status, or `missing` when
// there is none either.
Status StreamError(const json& j, const char* prefix, const char* missing) {
  if (auto e = j.find("error"); e != j.end() && e->is_object()) {
    int64_t code = 0;
    GetInt(*e, "grpc_code", &code);
    std::string message = e->value("message", std::string());
    return Status::Error(GrpcToErrno(code, message), prefix + message);
  }
  return Bad(missing);
}

}  // namespace

Result<int64_t> DecodeLeaseKeepAlive(std::string_view body) {
  KVFS_ASSIGN_OR_RETURN(json j, Parse(body));
  auto result = j.find("result");
  if (result == j.end() || !result->is_object()) {
    return StreamError(j, "etcd: ", "keepalive result");
  }
  int64_t ttl = 0;
  if (!GetInt(*result, "TTL", &ttl)) return Bad("keepalive TTL");
  if (ttl <= 0) return Status::NotFound("etcd: lease expired");
  return ttl;
}

Result<WatchResponse> DecodeWatch(std::string_view line) {
  KVFS_ASSIGN_OR_RETURN(json j, Parse(line));
  auto result = j.find("result");
  if (result == j.end() || !result->is_object()) {
    return StreamError(j, "etcd watch: ", "watch message without result");
  }
  WatchResponse w;
  KVFS_ASSIGN_OR_RETURN(w.revision, HeaderRevision(*result));
  w.cluster_id = HeaderClusterId(*result);
  if (!GetBool(*result, "canceled", &w.canceled) ||
      !GetInt(*result, "compact_revision", &w.compact_revision)) {
    return Bad("watch fields");
  }
  if (auto reason = result->find("cancel_reason"); reason != result->end() && reason->is_string())
    w.cancel_reason = reason->get<std::string>();
  if (auto events = result->find("events"); events != result->end() && !events->is_null()) {
    if (!events->is_array()) return Bad("events is not an array");
    w.events.resize(events->size());
    for (size_t i = 0; i < events->size(); ++i) {
      const json& ev = (*events)[i];
      if (!ev.is_object()) return Bad("event is not an object");
      Event& out = w.events[i];
      auto type = ev.find("type");
      if (type != ev.end() && type->is_string() && type->get<std::string>() == "DELETE") {
        out.type = Event::Type::kDelete;
      } else if (type != ev.end() && !(type->is_string() && type->get<std::string>() == "PUT")) {
        return Bad("event type");
      }
      auto kv = ev.find("kv");
      if (kv == ev.end()) return Bad("event without kv");
      KVFS_RETURN_IF_ERROR(DecodeKv(*kv, &out.kv));
    }
  }
  return w;
}

Status DecodeError(long http_status, std::string_view body) {
  json j = json::parse(body, nullptr, false);
  std::string message;
  int64_t code = 0;
  if (j.is_object()) {
    if (auto m = j.find("message"); m != j.end() && m->is_string()) message = m->get<std::string>();
    if (message.empty()) {
      if (auto e = j.find("error"); e != j.end() && e->is_string()) message = e->get<std::string>();
    }
    GetInt(j, "code", &code);
  }
  if (message.empty()) message = "HTTP " + std::to_string(http_status);
  return Status::Error(GrpcToErrno(code, message), "etcd: " + message);
}

}  // namespace kvfs::etcd::json
