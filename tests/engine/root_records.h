// Helpers of the engine tests that publish a few small files and directories at the root: a
// small engine's options, their records, a 64 KiB chunk of one byte value, and the names a
// store holds.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kvfs/chunk_store.h"
#include "kvfs/local_engine.h"

namespace kvfs::testing {

// 64 MiB in one device file under `dir`, a shallow queue.
inline EngineOptions SmallEngineOptions(const std::string& dir) {
  EngineOptions o;
  o.data_dir = dir;
  o.capacity = 64ull << 20;
  o.queue_depth = 4;
  return o;
}

// A file at the root when `layout` is set, else a directory.
inline ObjectRecord RootRecord(ObjectId id, const std::string& name, LayoutRef layout = nullptr) {
  ObjectRecord r;
  r.id = id;
  r.parent = kRootId;
  r.name = name;
  r.type = layout ? ObjectType::kFile : ObjectType::kDirectory;
  r.mode = 0644;
  r.layout = std::move(layout);
  return r;
}

inline LayoutRef SmallChunk(ChunkStore& store, char fill) {
  auto w = store.NewWriter(nullptr);
  EXPECT_TRUE(w.ok());
  std::vector<char> data(64 << 10, fill);
  EXPECT_TRUE((*w)->Write(0, data.data(), data.size()).ok());
  auto l = (*w)->Finish();
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return l.ok() ? *l : nullptr;
}

inline std::map<ObjectId, std::string> Names(const ChunkStore& store) {
  std::map<ObjectId, std::string> out;
  for (const auto& r : store.Records()) out[r.id] = r.name;
  return out;
}

}  // namespace kvfs::testing
