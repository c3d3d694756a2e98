// Test doubles shared by the namespace tests of remote changes (namespace_remote_test.cc,
// namespace_refused_test.cc): a sink that records what the kernel is told, another node's
// record, and a memory store that says its namespace is shared.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <string_view>
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

// This node's new file `name` in the root with `data` written, not published yet (its close
// publishes it): the writer's entry and handle, or a null handle (and a test failure) when the
// create or the write failed.
inline std::pair<EntryInfo, FileHandle*> NewFileInWriting(Namespace& ns, const std::string& name,
                                                          std::string_view data) {
  auto created = ns.Create(kRootId, name, 0644, O_WRONLY | O_CREAT, 0, 0);
  EXPECT_TRUE(created.ok());
  if (!created.ok()) return {};
  const bool written = ns.Write(created->second, 0, data.data(), data.size()).ok();
  EXPECT_TRUE(written);
  if (!written) return {created->first, nullptr};
  return *created;
}

// A store that says its namespace is shared, as the cluster's is: the fs then remembers the
// order of its own changes, which a shared store's resets are measured against.
class SharedMemoryStore : public MemoryStore {
 public:
  bool SharedNamespace() const override { return true; }
};

}  // namespace kvfs::fs
