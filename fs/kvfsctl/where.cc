// kvfsctl where PATH...: which nodes hold each file's chunk and whether this node has a copy,
// from the file's user.kvfs.location xattr ({"chunk_key", "replicas", "local", "holders"}).
// Exit status: 0 when every path was answered and every chunk has a holder that is up (or is
// this node), 1 otherwise (a path that cannot be asked, or a chunk only down nodes hold).
#include <sys/xattr.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "json_text.h"
#include "kvfsctl.h"

namespace kvfs::fs {
namespace {

struct Answer {
  nlohmann::json location;  // null when error is set
  std::string error;
};

Answer Ask(const std::string& path) {
  std::string value(64 * 1024, '\0');
  const ssize_t n = ::lgetxattr(path.c_str(), "user.kvfs.location", value.data(), value.size());
  if (n < 0) {
    const int err = errno;
    if (IsControlPath(path)) return {nullptr, kControlPathRefusal};
    if (err == ENODATA || err == EOPNOTSUPP)
      return {nullptr, "no chunk location (a directory, a symlink, or an unpublished file)"};
    return {nullptr, std::strerror(err)};
  }
  value.resize(static_cast<size_t>(n));
  auto j = nlohmann::json::parse(value, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return {nullptr, "malformed user.kvfs.location"};
  return {std::move(j), ""};
}

std::string Text(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) return "-";
  if (j[key].is_string()) return j[key].get<std::string>();
  return JsonText(j[key]);
}

// A chunk is readable from here when this node has it or a holder is up (or is this node).
bool Reachable(const nlohmann::json& loc) {
  if (loc.value("local", false)) return true;
  for (const auto& h : loc.value("holders", nlohmann::json::array())) {
    const std::string state = h.value("state", std::string());
    if (state == "up" || state == "self") return true;
  }
  return false;
}

void Print(const std::string& path, const nlohmann::json& loc) {
  std::printf("%s\n", path.c_str());
  std::string key = Text(loc, "chunk_key");
  if (key.empty()) key = "- (single node: the local engine's own)";
  std::printf("  chunk    %s\n", key.c_str());
  std::printf("  local    %s\n", loc.value("local", false) ? "yes (this node has a copy)" : "no");
  const auto& holders = loc.value("holders", nlohmann::json::array());
  if (holders.empty()) std::printf("  holders  none\n");
  bool first = true;
  for (const auto& h : holders) {
    std::string address = Text(h, "address");
    if (address.empty()) address = "-";
    std::printf("  %-8s %-5s %-22s %s\n", first ? "holders" : "", Text(h, "id").c_str(),
                address.c_str(), Text(h, "state").c_str());
    first = false;
  }
}

}  // namespace

int Where(const std::vector<std::string>& paths, bool json) {
  nlohmann::json results = nlohmann::json::array();
  int failed = 0;
  for (const std::string& path : paths) {
    Answer a = Ask(path);
    std::string problem = a.error;
    if (problem.empty() && !Reachable(a.location)) problem = "no holder is up";
    if (!problem.empty()) ++failed;
    if (json) {
      results.push_back(
          {{"path", path}, {"ok", problem.empty()}, {"error", problem}, {"location", a.location}});
      continue;
    }
    if (!a.error.empty()) {
      std::fprintf(stderr, "kvfsctl where: %s: %s\n", path.c_str(), a.error.c_str());
      continue;
    }
    Print(path, a.location);
    if (!problem.empty())
      std::fprintf(stderr, "kvfsctl where: %s: %s\n", path.c_str(), problem.c_str());
  }
  if (json) std::printf("%s\n", JsonText(nlohmann::json{{"where", results}}, 2).c_str());
  return failed == 0 ? 0 : 1;
}

}  // namespace kvfs::fs
