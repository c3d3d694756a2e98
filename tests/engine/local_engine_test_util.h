// Helpers shared by the LocalEngine tests (local_engine_test.cc, local_engine_recovery_test.cc,
// local_engine_fault_test.cc): engine options for a temp dir, test patterns, and writing,
// publishing and reading back whole chunks.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kvfs/local_engine.h"

namespace kvfs::local_engine_test {

inline constexpr uint64_t kMiB = 1 << 20;

inline EngineOptions Opts(const std::string& dir, uint64_t capacity = 96 * kMiB) {
  EngineOptions o;
  o.data_dir = dir;
  o.capacity = capacity;
  o.queue_depth = 8;
  return o;
}

inline std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; i += 4) {
    uint32_t x = rng();
    std::memcpy(v.data() + i, &x, std::min<size_t>(4, n - i));
  }
  return v;
}

inline std::unique_ptr<LocalEngine> OpenOk(const EngineOptions& o) {
  auto e = LocalEngine::Open(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

// An engine in `dir` whose device I/O passes through `faults` (the caller keeps it to steer it).
inline std::unique_ptr<LocalEngine> OpenWithFaults(const std::string& dir,
                                                   std::shared_ptr<IoFaultInjector> faults) {
  EngineOptions o = Opts(dir);
  o.fault_injector = std::move(faults);
  return OpenOk(o);
}

inline LayoutRef WriteChunk(ChunkStore& store, const std::vector<uint8_t>& data,
                            size_t piece = kMiB, LayoutRef base = nullptr) {
  auto w = store.NewWriter(base);
  EXPECT_TRUE(w.ok());
  for (size_t off = 0; off < data.size(); off += piece) {
    const size_t n = std::min(piece, data.size() - off);
    Status st = (*w)->Write(off, data.data() + off, n);
    EXPECT_TRUE(st.ok()) << st.ToString();
  }
  auto l = (*w)->Finish();
  EXPECT_TRUE(l.ok()) << l.status().ToString();
  return l.ok() ? *l : nullptr;
}

inline ObjectRecord FileRecord(ObjectId id, const std::string& name, LayoutRef layout) {
  ObjectRecord r;
  r.id = id;
  r.parent = kRootId;
  r.name = name;
  r.type = ObjectType::kFile;
  r.mode = 0644;
  r.mtime = {1700000000, 5};
  r.layout = std::move(layout);
  return r;
}

inline Status Publish(ChunkStore& store, ObjectId id, const std::string& name, LayoutRef layout) {
  MetaBatch b;
  b.puts.push_back(FileRecord(id, name, std::move(layout)));
  return store.Apply(b);
}

inline std::vector<uint8_t> ReadAll(ChunkStore& store, const LayoutRef& layout) {
  std::vector<uint8_t> out(layout ? layout->size : 0);
  auto n = store.Read(layout, 0, out.data(), out.size());
  EXPECT_TRUE(n.ok()) << n.status().ToString();
  if (n.ok()) {
    EXPECT_EQ(*n, out.size());
  }
  return out;
}

// Damage at rest: XORs `mask` into the byte at `offset` of the engine's first device file.
inline void FlipDeviceByte(const std::string& dir, uint64_t offset, uint8_t mask) {
  const std::string device = dir + "/device0.kvfs";
  int fd = ::open(device.c_str(), O_RDWR);
  ASSERT_GE(fd, 0) << device;
  uint8_t c = 0;
  const bool read = ::pread(fd, &c, 1, static_cast<off_t>(offset)) == 1;
  c ^= mask;
  const bool written = read && ::pwrite(fd, &c, 1, static_cast<off_t>(offset)) == 1;
  ::fsync(fd);
  ::close(fd);
  ASSERT_TRUE(written) << device << " at " << offset;
}

inline LayoutRef FindLayout(const std::vector<ObjectRecord>& recs, ObjectId id) {
  for (const auto& r : recs) {
    if (r.id == id) return r.layout;
  }
  return nullptr;
}

inline std::map<ObjectId, ObjectRecord> RecordsById(LocalEngine& e) {
  std::map<ObjectId, ObjectRecord> out;
  for (ObjectRecord& r : e.Records()) out[r.id] = std::move(r);
  return out;
}

}  // namespace kvfs::local_engine_test
