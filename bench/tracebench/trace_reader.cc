#include "trace_reader.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace kvfs::tracebench {

Result<std::vector<eviction::TraceRequest>> ReadJsonlTrace(const std::string& path,
                                                           size_t max_requests) {
  std::ifstream in(path);
  if (!in) return Status::NotFound("cannot open trace " + path);
  std::vector<eviction::TraceRequest> trace;
  std::string line;
  size_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    if (max_requests && trace.size() >= max_requests) break;
    // Parse without exceptions: a malformed line is an error value naming the line.
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    const auto bad = [&](const char* what) {
      return Status::Invalid(path + ":" + std::to_string(line_no) + ": " + what);
    };
    if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
    auto ids = j.find("hash_ids");
    if (ids == j.end() || !ids->is_array()) return bad("missing hash_ids array");
    eviction::TraceRequest req;
    auto num = [&](const char* key, uint64_t* out) {
      auto it = j.find(key);
      if (it == j.end()) return true;  // optional
      if (!it->is_number_unsigned() && !it->is_number_integer()) return false;
      *out = it->get<uint64_t>();
      return true;
    };
    uint64_t in_len = 0, out_len = 0;
    if (!num("timestamp", &req.timestamp_ms) || !num("input_length", &in_len) ||
        !num("output_length", &out_len)) {
      return bad("timestamp/input_length/output_length must be integers");
    }
    req.input_tokens = static_cast<uint32_t>(in_len);
    req.output_tokens = static_cast<uint32_t>(out_len);
    for (const auto& id : *ids) {
      if (!id.is_number_unsigned() && !id.is_number_integer()) return bad("hash_ids not integers");
      req.blocks.push_back(id.get<uint64_t>());
    }
    if (req.input_tokens == 0) req.input_tokens = static_cast<uint32_t>(req.blocks.size() * 512);
    trace.push_back(std::move(req));
  }
  return trace;
}

}  // namespace kvfs::tracebench
