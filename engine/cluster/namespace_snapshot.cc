// The cluster namespace on disk: one snapshot file in the state dir (the local engine's data
// dir), replaced atomically (engine/atomic_file) when the namespace changed, at most every
// snapshot_interval, and at Shutdown and Sync. Open loads it before joining, so a node that
// restarts alone comes back with its names; peers' newer changes merge in by stamp after.
//
// File: "KVFSNS01", u64 payload length, u64 XXH3 of the payload, payload = the NamespaceUpdate
// wire encoding (records and tombstones). A torn or corrupt file is logged and ignored: the
// node starts with an empty namespace and relearns it from its peers.
#include <spdlog/spdlog.h>
#include <xxhash.h>

#include <cstring>

#include "atomic_file.h"
#include "cluster_store.h"

namespace kvfs::cluster {
namespace {

constexpr char kSnapshotName[] = "cluster-namespace.snap";
constexpr char kMagic[] = "KVFSNS01";
constexpr size_t kMagicLen = 8;
constexpr size_t kHeaderLen = kMagicLen + 16;

void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

}  // namespace

Status ClusterStore::SaveSnapshot() {
  if (options_.state_dir.empty()) return Status::Ok();
  std::lock_guard one(snapshot_mu_);
  wire::NamespaceUpdate all;
  all.origin = options_.self;
  uint64_t version;
  {
    std::lock_guard lock(mu_);
    version = ns_version_;
    if (version == saved_version_) return Status::Ok();
    all.puts.reserve(ns_.size());
    for (const auto& [id, e] : ns_) all.puts.push_back(ToWire(e));
    for (const auto& [id, t] : tombstones_) all.removes.push_back({id, t.stamp, t.origin});
  }
  std::string payload = wire::Encode(all);
  std::string file(kMagic, kMagicLen);
  PutU64(file, payload.size());
  PutU64(file, XXH3_64bits(payload.data(), payload.size()));
  file += payload;
  KVFS_RETURN_IF_ERROR(
      WriteFileAtomically(*FileSystem::Posix(), options_.state_dir, kSnapshotName, file));
  saved_version_ = version;
  return Status::Ok();
}

Status ClusterStore::LoadSnapshot() {
  if (options_.state_dir.empty()) return Status::Ok();
  const std::string path = options_.state_dir + "/" + kSnapshotName;
  auto bytes = ReadWholeFile(*FileSystem::Posix(), path);
  if (!bytes.ok()) {
    if (bytes.status().err() == ENOENT) return Status::Ok();
    return bytes.status();
  }
  const std::string& f = *bytes;
  if (f.size() < kHeaderLen || std::memcmp(f.data(), kMagic, kMagicLen) != 0 ||
      GetU64(f.data() + kMagicLen) != f.size() - kHeaderLen ||
      GetU64(f.data() + kMagicLen + 8) !=
          XXH3_64bits(f.data() + kHeaderLen, f.size() - kHeaderLen)) {
    spdlog::error("cluster: namespace snapshot {} is damaged; starting from the peers' namespace",
                  path);
    return Status::Ok();
  }
  wire::NamespaceUpdate all;
  Status st = wire::Decode(wire::AsBytes(std::string_view(f).substr(kHeaderLen)), &all);
  if (!st.ok()) {
    spdlog::error("cluster: namespace snapshot {} does not decode ({}); ignored", path,
                  st.ToString());
    return Status::Ok();
  }
  KVFS_RETURN_IF_ERROR(Merge(all));
  {
    std::lock_guard one(snapshot_mu_);  // order: snapshot_mu_ before mu_, as in SaveSnapshot
    std::lock_guard lock(mu_);
    saved_version_ = ns_version_;
    spdlog::info("cluster node {}: namespace snapshot loaded: {} records, {} tombstones",
                 options_.self, ns_.size(), tombstones_.size());
  }
  return Status::Ok();
}

void ClusterStore::Housekeeping() {
  std::unique_lock lock(house_mu_);
  while (!house_stop_) {
    house_cv_.wait_for(lock, options_.snapshot_interval, [&] { return house_stop_; });
    if (house_stop_) break;
    lock.unlock();
    DrainLocalRemovals();
    if (Status st = SaveSnapshot(); !st.ok())
      spdlog::warn("cluster: namespace snapshot failed: {}", st.ToString());
    lock.lock();
  }
}

}  // namespace kvfs::cluster
