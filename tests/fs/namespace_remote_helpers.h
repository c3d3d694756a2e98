// Test doubles shared by the namespace tests of remote changes (namespace_remote_test.cc,
// namespace_refused_test.cc): a sink that records what the kernel is told, another node's
// record, and a memory store that says its namespace is shared.
#pragma once

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "memory_store.h"
#include "namespace.h"

namespace kvfs::fs {

// Remote changes notify the kernel only about what it may have cached: every node applies every
// change of the cluster, mostly in directories it never looked at.
class RecordingSink : public InvalidationSink {
 public:
  void InvalidateInode(uint64_t ino, bool data) override { inodes.emplace_back(ino, data); }
  void InvalidateEntry(uint64_t parent, const std::string& name) override {
    entries.emplace_back(parent, name);
  }
  void Clear() {
    inodes.clear();
    entries.clear();
  }
  bool ToldEntry(uint64_t parent, const std::string& name) const {
    return std::find(entries.begin(), entries.end(), std::pair{parent, name}) != entries.end();
  }
  std::vector<std::pair<uint64_t, bool>> inodes;
  std::vector<std::pair<uint64_t, std::string>> entries;
};

inline ObjectRecord RemoteRecord(ObjectId id, ObjectId parent, const std::string& name,
                                 ObjectType type, uint64_t revision) {
  ObjectRecord r;
  r.id = id;
  r.parent = parent;
  r.name = name;
  r.type = type;
  r.mode = type == ObjectType::kDirectory ? 0755 : 0644;
  r.revision = revision;
  return r;
}

// A store that says its namespace is shared, as the cluster's is: the fs then remembers the
// order of its own changes, which a shared store's resets are measured against.
class SharedMemoryStore : public MemoryStore {
 public:
  bool SharedNamespace() const override { return true; }
};

}  // namespace kvfs::fs
