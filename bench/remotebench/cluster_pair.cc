#include "cluster_pair.h"

#include <filesystem>

namespace remotebench {

using kvfs::Result;
using kvfs::Status;
using kvfs::cluster::ClusterOptions;
using kvfs::cluster::ClusterStore;

namespace {

kvfs::SharedSecret BenchSecret() {
  return kvfs::SharedSecret::FromBytes("remotebench-secret-0123456789abcdef").value();
}

}  // namespace

ClusterPair::~ClusterPair() {
  // Stores first: they serve and read through the engines.
  b_.reset();
  a_.reset();
  engine_b_.reset();
  engine_a_.reset();
}

Status ClusterPair::Start(const std::string& dir, uint64_t capacity) {
  std::vector<kvfs::cluster::NodeInfo> nodes;
  for (int i = 0; i < 2; ++i) {
    kvfs::EngineOptions eo;
    eo.data_dir = dir + (i == 0 ? "/a" : "/b");
    std::filesystem::create_directories(eo.data_dir);
    eo.capacity = capacity;
    eo.durability = kvfs::Durability::kAsync;  // publish cost is not what is measured
    KVFS_ASSIGN_OR_RETURN(auto engine, kvfs::LocalEngine::Open(eo));
    ClusterOptions co;
    co.self = static_cast<kvfs::cluster::NodeId>(i + 1);
    co.replicas = 0;  // the writer's copy only: B must fetch every byte from A
    co.secret = BenchSecret();
    co.request_timeout = std::chrono::seconds(20);  // 2 cores shared with builds: be patient
    KVFS_ASSIGN_OR_RETURN(auto store, ClusterStore::Open(engine.get(), co));
    KVFS_ASSIGN_OR_RETURN(uint16_t port, store->Listen("127.0.0.1", 0));
    nodes.push_back({co.self, {"127.0.0.1", port}});
    (i == 0 ? engine_a_ : engine_b_) = std::move(engine);
    (i == 0 ? a_ : b_) = std::move(store);
  }
  KVFS_RETURN_IF_ERROR(a_->Join(nodes));
  return b_->Join(nodes);
}

Status ClusterPair::Publish(const std::string& name, std::span<const uint8_t> data) {
  KVFS_ASSIGN_OR_RETURN(std::unique_ptr<kvfs::ChunkWriter> w, a_->NewWriter(nullptr));
  KVFS_RETURN_IF_ERROR(w->Write(0, data.data(), data.size()));
  KVFS_ASSIGN_OR_RETURN(kvfs::LayoutRef layout, w->Finish());
  kvfs::ObjectRecord rec;
  rec.id = a_->NewId();
  rec.parent = kvfs::kRootId;
  rec.name = name;
  rec.type = kvfs::ObjectType::kFile;
  rec.mode = 0644;
  rec.layout = std::move(layout);
  kvfs::MetaBatch batch;
  batch.puts.push_back(std::move(rec));
  KVFS_RETURN_IF_ERROR(a_->Apply(batch));
  published_.push_back(batch.puts.front().id);
  return Status::Ok();
}

Result<kvfs::LayoutRef> ClusterPair::LayoutOnB(const std::string& name) const {
  for (const kvfs::ObjectRecord& r : b_->Records()) {
    if (r.parent == kvfs::kRootId && r.name == name && r.layout) return r.layout;
  }
  return Status::NotFound("node B does not know /" + name);
}

Result<size_t> ClusterPair::ReadOnB(const kvfs::LayoutRef& layout, std::span<uint8_t> out) {
  size_t done = 0;
  while (done < out.size()) {
    KVFS_ASSIGN_OR_RETURN(size_t n, b_->Read(layout, done, out.data() + done, out.size() - done));
    if (n == 0) break;
    done += n;
  }
  return done;
}

Status ClusterPair::RemoveAll() {
  kvfs::MetaBatch batch;
  batch.removes = published_;
  published_.clear();
  return a_->Apply(batch);
}

}  // namespace remotebench
