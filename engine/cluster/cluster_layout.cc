#include "cluster_layout.h"

#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <unordered_set>

namespace kvfs::cluster {
namespace {

struct Registry {
  std::mutex mu;
  std::unordered_set<const Layout*> live;
};
Registry& TheRegistry() {
  static Registry* r = new Registry;  // never destroyed: layouts may outlive static teardown
  return *r;
}
void Register(const Layout* l) {
  Registry& r = TheRegistry();
  std::lock_guard lock(r.mu);
  r.live.insert(l);
}

}  // namespace

ClusterLayout::ClusterLayout() { Register(this); }
ClusterLayout::ClusterLayout(const ClusterLayout& other)
    : Layout(other), chunk_key(other.chunk_key), replicas(other.replicas), local(other.local) {
  Register(this);
}
ClusterLayout::~ClusterLayout() {
  Registry& r = TheRegistry();
  std::lock_guard lock(r.mu);
  r.live.erase(this);
}

const ClusterLayout* AsClusterLayout(const Layout* layout) {
  if (layout == nullptr) return nullptr;
  Registry& r = TheRegistry();
  std::lock_guard lock(r.mu);
  return r.live.count(layout) ? static_cast<const ClusterLayout*>(layout) : nullptr;
}

std::string ChunkKey(NodeId origin, ObjectId id) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "c%04x-%016" PRIx64, static_cast<unsigned>(origin), id);
  return buf;
}

}  // namespace kvfs::cluster
