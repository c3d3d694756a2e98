// kvfsctl nodes MOUNTPOINT: the cluster as the mounted node sees it, from MOUNTPOINT/.kvfs/nodes
// (one row per node: id, address, state, capacity, usage and the peer traffic counters).
// Exit status: 0 when every node is this one or up, 1 when a node is down (a problem an
// operator should look at) or the file cannot be read. A single-node mount lists itself.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "kvfs/size.h"
#include "json_text.h"

namespace kvfs::fs {
namespace {

uint64_t Count(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number_unsigned() ? j[key].get<uint64_t>() : 0;
}

std::string Text(const nlohmann::json& j, const char* key) {
  if (!j.contains(key)) return "-";
  if (j[key].is_string()) return j[key].get<std::string>();
  return JsonText(j[key]);
}

// "sent/received" pairs keep the table narrow; both directions matter when chasing traffic.
std::string Pair(const nlohmann::json& n, const char* a, const char* b) {
  return std::to_string(Count(n, a)) + "/" + std::to_string(Count(n, b));
}

void PrintTable(const nlohmann::json& doc) {
  const auto& nodes = doc.value("nodes", nlohmann::json::array());
  std::printf("node %s, %zu node%s, replicas %s, transport %s\n", Text(doc, "self").c_str(),
              nodes.size(), nodes.size() == 1 ? "" : "s", Text(doc, "replicas").c_str(),
              Text(doc, "transport").c_str());
  std::printf("%-5s %-22s %-5s %10s %10s %6s %13s %13s %13s\n", "ID", "ADDRESS", "STATE",
              "CAPACITY", "USED", "USE%", "GETS out/in", "PUTS out/in", "PUSHES out/in");
  for (const auto& n : nodes) {
    const uint64_t cap = Count(n, "capacity_bytes"), used = Count(n, "used_bytes");
    char pct[16] = "-";
    if (cap) {
      std::snprintf(pct, sizeof pct, "%.1f",
                    100.0 * static_cast<double>(used) / static_cast<double>(cap));
    }
    std::string address = Text(n, "address");
    if (address.empty()) address = "-";
    std::printf("%-5s %-22s %-5s %10s %10s %6s %13s %13s %13s\n", Text(n, "id").c_str(),
                address.c_str(), Text(n, "state").c_str(), cap ? FormatSize(cap).c_str() : "-",
                cap ? FormatSize(used).c_str() : "-", pct,
                Pair(n, "gets_sent", "gets_served").c_str(),
                Pair(n, "puts_sent", "puts_received").c_str(),
                Pair(n, "pushes_sent", "pushes_received").c_str());
  }
}

}  // namespace

// `root` is the mount point (already checked to be kvfs by the caller).
int Nodes(const std::string& root, bool json) {
  const std::string file = root + "/.kvfs/nodes";
  std::ifstream in(file);
  if (!in) {
    std::fprintf(stderr, "kvfsctl nodes: cannot read %s: %s%s\n", file.c_str(),
                 std::strerror(errno),
                 errno == ENOENT ? " (this kvfs daemon predates cluster support)" : "");
    return 1;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const auto doc = nlohmann::json::parse(ss.str(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("nodes") ||
      !doc["nodes"].is_array()) {
    std::fprintf(stderr, "kvfsctl nodes: malformed JSON in %s\n", file.c_str());
    return 1;
  }
  if (json)
    std::printf("%s\n", JsonText(doc, 2).c_str());
  else
    PrintTable(doc);
  int down = 0;
  for (const auto& n : doc["nodes"]) {
    const std::string state = n.value("state", std::string());
    if (state != "self" && state != "up") {
      ++down;
      if (!json)
        std::fprintf(stderr, "kvfsctl nodes: node %s is %s\n", Text(n, "id").c_str(),
                     state.empty() ? "in an unknown state" : state.c_str());
    }
  }
  return down == 0 ? 0 : 1;
}

}  // namespace kvfs::fs
