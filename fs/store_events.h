// StoreEvents: the fs layer's StoreListener. What the store changed on its own reaches the
// namespace here: records it removed (corrupt data, evictions), changes it undid or refused,
// and (a shared namespace) the commits of other nodes.
#pragma once

#include "kvfs/chunk_store.h"
#include "namespace.h"

namespace kvfs::fs {

class StoreEvents : public StoreListener {
 public:
  explicit StoreEvents(Namespace* ns) : ns_(ns) {}
  void OnDropped(ObjectId id) override {
    ns_->ForgetStoreRemoval(id, Namespace::StoreRemoval::kCorrupt);
  }
  void OnEvicted(ObjectId id) override {
    ns_->ForgetStoreRemoval(id, Namespace::StoreRemoval::kEvicted);
  }
  void OnRolledBack(ObjectId id, const ObjectRecord* record, ResetOrigin origin) override {
    ns_->RestoreStoreRecord(id, record, origin);
  }
  void OnCommitted(uint64_t seq, uint64_t revision) override { ns_->NoteCommitted(seq, revision); }
  void OnRemoteChanges(const std::vector<ObjectRecord>& puts,
                       const std::vector<ObjectId>& removes) override {
    ns_->ApplyRemoteChanges(puts, removes);
  }
  void OnRemoteResync(const std::vector<ObjectId>& present, uint64_t revision) override {
    ns_->ApplyRemoteResync(present, revision);
  }
  void OnRemoteHistoryLost() override { ns_->ForgetRemoteRevisions(); }

 private:
  Namespace* ns_;
};

}  // namespace kvfs::fs
