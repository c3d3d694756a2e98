// StoreEvents: the fs layer's StoreListener. Records the store removes on its own (corrupt
// data, evictions) leave the namespace through Namespace::ForgetStoreRemoval.
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
  void OnRolledBack(ObjectId id, const ObjectRecord* record) override {
    ns_->RestoreStoreRecord(id, record);
  }

 private:
  Namespace* ns_;
};

}  // namespace kvfs::fs
