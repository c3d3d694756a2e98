// Codecs of the cluster's namespace messages (kNamespacePush / kNamespacePull).
#include <gtest/gtest.h>

#include "kvfs/wire.h"

namespace kvfs::wire {
namespace {

TEST(NamespaceWire, UpdateRoundTrips) {
  NamespaceUpdate u;
  u.origin = 3;
  NamespaceRecord r;
  r.id = (uint64_t{3} << 48) | 7;
  r.parent = 1;
  r.name = "chunk-0001.bin";
  r.type = ObjectType::kFile;
  r.mode = 0644;
  r.uid = 10;
  r.gid = 20;
  r.flags = 1;
  r.mtime = {1700000000, 5};
  r.size = 12345;
  r.chunk_key = "c0003-0000000000000009";
  r.replicas = {2, 1, 3};
  r.stamp = 99;
  r.origin = 3;
  u.puts.push_back(r);
  u.removes.push_back({42, 100, 2});
  NamespaceUpdate d;
  ASSERT_TRUE(Decode(AsBytes(Encode(u)), &d).ok());
  EXPECT_EQ(d.origin, 3);
  ASSERT_EQ(d.puts.size(), 1u);
  EXPECT_EQ(d.puts[0].id, r.id);
  EXPECT_EQ(d.puts[0].name, r.name);
  EXPECT_EQ(d.puts[0].size, r.size);
  EXPECT_EQ(d.puts[0].chunk_key, r.chunk_key);
  EXPECT_EQ(d.puts[0].replicas, r.replicas);
  EXPECT_EQ(d.puts[0].mtime.sec, r.mtime.sec);
  EXPECT_EQ(d.puts[0].stamp, 99u);
  ASSERT_EQ(d.removes.size(), 1u);
  EXPECT_EQ(d.removes[0].id, 42u);
  EXPECT_EQ(d.removes[0].origin, 2);
}

TEST(NamespaceWire, TruncatedAndHugeCountsAreRejected) {
  NamespaceUpdate u;
  NamespaceRecord r;
  r.name = "x";
  u.puts.push_back(r);
  std::string bytes = Encode(u);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {
    NamespaceUpdate d;
    EXPECT_EQ(Decode(AsBytes(std::string_view(bytes).substr(0, cut)), &d).err(), EPROTO) << cut;
  }
  // A record count far beyond the bytes that follow fails before allocating.
  std::string huge = bytes;
  huge[2] = huge[3] = huge[4] = huge[5] = '\x7f';
  NamespaceUpdate d;
  EXPECT_EQ(Decode(AsBytes(huge), &d).err(), EPROTO);
}

}  // namespace
}  // namespace kvfs::wire
