// kvfsctl nodes MOUNTPOINT: the cluster as the mounted node sees it, from MOUNTPOINT/.kvfs/nodes
// (what etcd says: one row per node with id, address, state, capacity, usage and this node's
// requests to it and how many failed, the replicas it publishes with; the etcd endpoints, the
// namespace revision applied here, the repair this node leads and how its namespace changes
// fared in etcd). Exit status: 0 when every node is this one, up or draining, 1 when a node is
// down, does not answer this one or cannot be reached from it, or keeps another number of
// replicas than this one (problems an operator should look at), etcd is unreachable, or the
// file cannot be read. A single-node mount lists itself.
//
// kvfsctl drain|undrain MOUNTPOINT [--node N]: writes "drain N" to MOUNTPOINT/.kvfs/ctl.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "json_text.h"
#include "kvfs/size.h"

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

std::string Text(const nlohmann::json& j);

void PrintTable(const nlohmann::json& doc) {
  const auto& nodes = doc.value("nodes", nlohmann::json::array());
  std::printf("node %s, %zu node%s, replicas %s, transport %s\n", Text(doc, "self").c_str(),
              nodes.size(), nodes.size() == 1 ? "" : "s", Text(doc, "replicas").c_str(),
              Text(doc, "transport").c_str());
  std::printf("%-5s %-22s %-8s %10s %10s %6s %3s %10s %10s %8s\n", "ID", "ADDRESS", "STATE",
              "CAPACITY", "USED", "USE%", "R", "GETS sent", "PUTS sent", "FAILED");
  for (const auto& n : nodes) {
    const uint64_t cap = Count(n, "capacity_bytes"), used = Count(n, "used_bytes");
    char pct[16] = "-";
    if (cap) {
      std::snprintf(pct, sizeof pct, "%.1f",
                    100.0 * static_cast<double>(used) / static_cast<double>(cap));
    }
    std::string address = Text(n, "address");
    if (address.empty()) address = "-";
    const uint64_t r = Count(n, "replicas");
    std::printf("%-5s %-22s %-8s %10s %10s %6s %3s %10llu %10llu %8llu\n", Text(n, "id").c_str(),
                address.c_str(), Text(n, "state").c_str(), cap ? FormatSize(cap).c_str() : "-",
                cap ? FormatSize(used).c_str() : "-", pct, r ? std::to_string(r).c_str() : "-",
                static_cast<unsigned long long>(Count(n, "gets_sent")),
                static_cast<unsigned long long>(Count(n, "puts_sent")),
                static_cast<unsigned long long>(Count(n, "failures")));
  }
  if (doc.contains("etcd") && doc["etcd"].is_array() && !doc["etcd"].empty()) {
    std::string endpoints;
    for (const auto& e : doc["etcd"]) endpoints += (endpoints.empty() ? "" : ",") + Text(e);
    std::printf("etcd %s (%s), namespace revision %s\n", endpoints.c_str(),
                doc.value("etcd_reachable", false) ? "reachable" : "UNREACHABLE",
                Text(doc, "revision").c_str());
    const uint64_t history = Count(doc, "etcd_history_s");
    const auto compacted = doc.value("compacted_revision", int64_t{0});
    if (history == 0) {
      std::printf("etcd history: kvfs does not compact it (etcd's own auto-compaction must)\n");
    } else if (compacted > 0) {
      std::printf("etcd history: %llu s kept; this node compacted it to revision %lld\n",
                  static_cast<unsigned long long>(history), static_cast<long long>(compacted));
    } else {
      std::printf("etcd history: %llu s kept; compacted by the live node with the lowest id\n",
                  static_cast<unsigned long long>(history));
    }
    const auto& held = doc.value("compaction_held", nlohmann::json::object());
    if (Count(held, "revision") > 0) {
      std::printf(
          "etcd history: compaction held at revision %llu while node %llu reads the "
          "namespace\n",
          static_cast<unsigned long long>(Count(held, "revision")),
          static_cast<unsigned long long>(Count(held, "by_node")));
    }
    const auto& r = doc.value("repair", nlohmann::json::object());
    std::printf(
        "repair: %llu chunks waiting, %llu copied (%s), %llu failed, limit %s/s, %llu passes\n",
        static_cast<unsigned long long>(Count(r, "pending")),
        static_cast<unsigned long long>(Count(r, "repaired_chunks")),
        FormatSize(Count(r, "repaired_bytes")).c_str(),
        static_cast<unsigned long long>(Count(r, "failures")),
        FormatSize(Count(r, "bandwidth")).c_str(),
        static_cast<unsigned long long>(Count(r, "passes")));
    const auto& ns = doc.value("namespace", nlohmann::json::object());
    std::printf(
        "namespace changes of this node: %llu committed in %llu etcd transactions, %llu "
        "refused as conflicts, %llu names taken over, %llu refused with etcd unreachable\n",
        static_cast<unsigned long long>(Count(ns, "changes")),
        static_cast<unsigned long long>(Count(ns, "transactions")),
        static_cast<unsigned long long>(Count(ns, "conflicts")),
        static_cast<unsigned long long>(Count(ns, "names_taken_over")),
        static_cast<unsigned long long>(Count(ns, "refused_unreachable")));
  }
}

std::string Text(const nlohmann::json& j) {
  return j.is_string() ? j.get<std::string>() : JsonText(j);
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
  if (!doc.value("etcd_reachable", true)) {
    ++down;
    if (!json) std::fprintf(stderr, "kvfsctl nodes: etcd is unreachable from this node\n");
  }
  const uint64_t replicas = Count(doc, "replicas");
  for (const auto& n : doc["nodes"]) {
    const uint64_t r = Count(n, "replicas");
    if (r != 0 && replicas != 0 && r != replicas) {
      ++down;
      if (!json)
        std::fprintf(stderr,
                     "kvfsctl nodes: node %s keeps %llu replica%s of what it publishes, this node "
                     "%llu: start every node with the same --replicas\n",
                     Text(n, "id").c_str(), static_cast<unsigned long long>(r), r == 1 ? "" : "s",
                     static_cast<unsigned long long>(replicas));
    }
    const std::string state = n.value("state", std::string());
    if (state != "self" && state != "up" && state != "draining" && state != "drained") {
      ++down;
      if (!json)
        std::fprintf(stderr, "kvfsctl nodes: node %s is %s\n", Text(n, "id").c_str(),
                     state.empty() ? "in an unknown state" : state.c_str());
    } else if (n.value("unanswering", false)) {
      // Its lease lives, but it let this node's request time out: frozen, cut off from this
      // node, or overloaded. What only it holds cannot be read from here meanwhile.
      ++down;
      if (!json)
        std::fprintf(stderr,
                     "kvfsctl nodes: node %s is %s but let a request from this node time out; "
                     "reads skip it until it answers a ping\n",
                     Text(n, "id").c_str(), state.c_str());
    } else if (const std::string why = n.value("unreachable", std::string()); !why.empty()) {
      // Its lease lives, but this node cannot talk to it: its daemon died a moment ago,
      // another node or nothing kvfs listens at its address, or it has another secret.
      // Copies meant for it go to the next node; what only it holds cannot be read from here.
      ++down;
      if (!json)
        std::fprintf(stderr,
                     "kvfsctl nodes: node %s is %s in etcd but this node cannot reach it: %s\n",
                     Text(n, "id").c_str(), state.c_str(), why.c_str());
    }
  }
  return down == 0 ? 0 : 1;
}

int Drain(const std::string& root, bool drain, int node) {
  const std::string file = root + "/.kvfs/ctl";
  std::FILE* f = std::fopen(file.c_str(), "r+");
  if (!f) {
    std::fprintf(stderr, "kvfsctl: cannot open %s: %s\n", file.c_str(), std::strerror(errno));
    return 1;
  }
  const std::string cmd = std::string(drain ? "drain" : "undrain") + " " + std::to_string(node);
  std::fputs(cmd.c_str(), f);
  std::fflush(f);
  char buf[4096];
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  const auto reply = nlohmann::json::parse(std::string(buf, n), nullptr, false);
  if (reply.is_discarded() || !reply.value("ok", false)) {
    std::fprintf(stderr, "kvfsctl %s: %s\n", drain ? "drain" : "undrain",
                 reply.is_discarded() ? "no reply" : reply.value("error", "failed").c_str());
    return 1;
  }
  std::printf("node %s %s\n", node == 0 ? "(this one)" : std::to_string(node).c_str(),
              drain ? "draining: no new copies go there, its chunks are copied elsewhere"
                    : "takes copies again");
  return 0;
}

}  // namespace kvfs::fs
