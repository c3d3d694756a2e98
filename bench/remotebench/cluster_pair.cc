#include "cluster_pair.h"

#include <chrono>
#include <filesystem>
#include <thread>

namespace remotebench {

using kvfs::Result;
using kvfs::Status;
using kvfs::cluster::ClusterStore;

namespace {

kvfs::SharedSecret BenchSecret() {
  return kvfs::SharedSecret::FromBytes("remotebench-secret-0123456789abcdef").value();
}

}  // namespace

ClusterPair::~ClusterPair() {
  if (b_) b_->SetListener(nullptr);
  b_.reset();
  a_.reset();
}

Status ClusterPair::Start(const std::string& dir, uint64_t capacity) {
  KVFS_RETURN_IF_ERROR(etcd_.Start());
  for (int i = 0; i < 2; ++i) {
    kvfs::EngineOptions eo;
    eo.data_dir = dir + (i == 0 ? "/a" : "/b");
    std::filesystem::create_directories(eo.data_dir);
    eo.capacity = capacity;
    eo.durability = kvfs::Durability::kAsync;  // publish cost is not what is measured
    KVFS_ASSIGN_OR_RETURN(auto engine, kvfs::LocalEngine::Open(eo));
    kvfs::ClusterOptions co;
    co.node_id = static_cast<uint16_t>(i + 1);
    co.listen_host = "127.0.0.1";
    co.etcd.endpoints = {etcd_.endpoint()};
    co.replicas = 1;  // the writer's copy only: B must fetch every byte from A
    co.secret = BenchSecret();
    co.transport = kvfs::TransportKind::kTcp;
    co.request_timeout = std::chrono::seconds(20);  // 2 cores shared with builds: be patient
    KVFS_ASSIGN_OR_RETURN(auto store, ClusterStore::Open(std::move(engine), co));
    (i == 0 ? a_ : b_) = std::move(store);
  }
  a_->SetListener(&none_);
  base_used_ = a_->local()->Stats().used_bytes;
  b_->SetListener(this);
  return Status::Ok();
}

void ClusterPair::OnRemoteChanges(const std::vector<kvfs::ObjectRecord>& puts,
                                  const std::vector<kvfs::ObjectId>&) {
  std::lock_guard lock(mu_);
  for (const auto& r : puts)
    if (r.parent == kvfs::kRootId && r.layout) seen_by_b_[r.name] = r.layout;
  cv_.notify_all();
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
  batch.names.push_back({kvfs::kRootId, name, kvfs::kInvalidId, rec.id});
  batch.puts.push_back(rec);
  KVFS_ASSIGN_OR_RETURN(uint64_t token, a_->Submit(batch));
  KVFS_ASSIGN_OR_RETURN(kvfs::Committed done, a_->AwaitCommitted(token));
  rec.revision = done.revision;
  published_.push_back(std::move(rec));
  return Status::Ok();
}

Result<kvfs::LayoutRef> ClusterPair::LayoutOnB(const std::string& name) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, std::chrono::seconds(10), [&] { return seen_by_b_.count(name) > 0; }))
    return Status::NotFound("node B does not know /" + name);
  return seen_by_b_[name];
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
  // In pieces: one etcd transaction holds a bounded number of operations.
  for (size_t i = 0; i < published_.size(); i += 32) {
    kvfs::MetaBatch batch;
    for (size_t j = i; j < std::min(published_.size(), i + 32); ++j) {
      const kvfs::ObjectRecord& r = published_[j];
      batch.removes.push_back(r.id);
      batch.remove_revisions.push_back(r.revision);
      batch.names.push_back({kvfs::kRootId, r.name, r.id, kvfs::kInvalidId});
    }
    KVFS_RETURN_IF_ERROR(a_->Apply(batch));
  }
  published_.clear();
  // A's copies are freed once the removals are durable, after Apply returns: wait for the
  // space, or the next size's objects would be evicted to make room while being read.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (a_->local()->Stats().used_bytes > base_used_) {
    if (std::chrono::steady_clock::now() > deadline) {
      return Status::IoError("node A did not free the removed chunks within 30 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status::Ok();
}

}  // namespace remotebench
