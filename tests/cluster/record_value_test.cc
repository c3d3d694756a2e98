// The etcd value of a namespace record: round trip (checksum included, and user xattrs in format
// 3), the older format without a checksum still decodes, and damaged values (every truncation,
// every single-byte change of the format byte, random garbage) are refused without crashing.
#include "record_value.h"

#include <gtest/gtest.h>

#include <random>

#include "cluster_layout.h"

namespace kvfs::cluster {
namespace {

ObjectRecord FileWithData() {
  ObjectRecord r;
  r.id = 0x0001000000000042;
  r.parent = kRootId;
  r.name = "0f3a9c.kv";
  r.type = ObjectType::kFile;
  r.mode = 0644;
  r.mtime = {1700000000, 7};
  r.extra_links.push_back({kRootId, "alias"});
  HolderList holders;
  holders.Add(3);
  holders.Add(1);
  r.layout = MakeClusterLayout(33554432, 0x0001000000000041, holders, 0xfeedfacecafebeefull);
  return r;
}

TEST(RecordValueTest, RoundTripKeepsChunkHoldersAndChecksum) {
  const ObjectRecord rec = FileWithData();
  auto back = DecodeRecordValue(EncodeRecordValue(rec, 3), 99);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->origin, 3);
  EXPECT_EQ(back->record.revision, 99u);
  EXPECT_EQ(back->record.name, rec.name);
  ASSERT_EQ(back->record.extra_links.size(), 1u);
  EXPECT_EQ(back->record.extra_links[0].name, "alias");
  const ClusterLayout* cl = AsClusterLayout(back->record.layout);
  ASSERT_NE(cl, nullptr);
  EXPECT_EQ(cl->size, 33554432u);
  EXPECT_EQ(cl->chunk, 0x0001000000000041u);
  EXPECT_EQ(cl->checksum, 0xfeedfacecafebeefull);
  EXPECT_EQ(cl->holders.ToVector(), (std::vector<NodeId>{3, 1}));
}

TEST(RecordValueTest, OnlyClusterLayoutsAreTakenForOne) {
  EXPECT_EQ(AsClusterLayout(nullptr), nullptr);
  auto engine_layout = std::make_shared<Layout>();
  engine_layout->size = 4096;
  engine_layout->segments.push_back(Segment{});
  EXPECT_EQ(AsClusterLayout(engine_layout), nullptr);
  LayoutRef cluster = MakeClusterLayout(1, 2, HolderList(std::vector<NodeId>{4}), 5);
  ASSERT_NE(AsClusterLayout(cluster), nullptr);
  EXPECT_EQ(AsClusterLayout(cluster)->holders.ToVector(), std::vector<NodeId>{4});
  EXPECT_EQ(cluster.use_count(), 1);
}

TEST(RecordValueTest, FormatOneWithoutChecksumStillDecodes) {
  std::string v = EncodeRecordValue(FileWithData(), 3);
  // Format 2 put the 8 checksum bytes after the 8 chunk bytes, before the holder count and the
  // two holders (1 + 2 x 2 bytes at the end).
  const size_t tail = 1 + 2 * 2;
  std::string v1 = v.substr(0, v.size() - tail - 8) + v.substr(v.size() - tail);
  v1[0] = 1;
  auto back = DecodeRecordValue(v1, 5);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  const ClusterLayout* cl = AsClusterLayout(back->record.layout);
  ASSERT_NE(cl, nullptr);
  EXPECT_EQ(cl->chunk, 0x0001000000000041u);
  EXPECT_EQ(cl->checksum, 0u);  // unknown
  EXPECT_EQ(cl->holders.ToVector(), (std::vector<NodeId>{3, 1}));
  // The old length under the new format byte (and the reverse) does not parse.
  v1[0] = 2;
  EXPECT_FALSE(DecodeRecordValue(v1, 5).ok());
  v[0] = 1;
  EXPECT_FALSE(DecodeRecordValue(v, 5).ok());
}

TEST(RecordValueTest, XattrsRoundTripInFormatThreeOnly) {
  ObjectRecord rec = FileWithData();
  const std::string plain = EncodeRecordValue(rec, 3);
  EXPECT_EQ(plain[0], 2);  // no xattrs: readable by a node that knows format 2 alone
  const std::vector<Xattr> list = {
      {"user.a", std::string("\0\xff", 2)},
      {"user.b", std::string(kMaxXattrBytes - 14, 'v')}};  // at the bound
  rec.set_xattrs(list);
  const std::string v = EncodeRecordValue(rec, 3);
  EXPECT_EQ(v[0], 3);
  EXPECT_EQ(v.substr(1, plain.size() - 1), plain.substr(1));  // format 2, then the list
  auto back = DecodeRecordValue(v, 7);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->record.xattrs(), list);
  EXPECT_NE(AsClusterLayout(back->record.layout), nullptr);
  for (size_t n = plain.size(); n < v.size(); ++n) {
    EXPECT_FALSE(DecodeRecordValue(std::string_view(v.data(), n), 1).ok()) << "length " << n;
  }
  // Format 3 with no list, and lists a record may not hold.
  std::string empty = plain + std::string(2, '\0');
  empty[0] = 3;
  EXPECT_FALSE(DecodeRecordValue(empty, 1).ok());
  for (const std::vector<Xattr>& bad :
       std::vector<std::vector<Xattr>>{{{"user.b", "1"}, {"user.a", "1"}},
                                       {{"user.a", "1"}, {"user.a", "1"}},
                                       {{"security.a", "1"}},
                                       {{"user.b", std::string(kMaxXattrBytes - 5, 'v')}}}) {
    rec.set_xattrs(bad);
    EXPECT_FALSE(DecodeRecordValue(EncodeRecordValue(rec, 3), 1).ok()) << bad[0].name;
  }
}

TEST(RecordValueTest, DamagedValuesAreRefused) {
  const std::string v = EncodeRecordValue(FileWithData(), 3);
  for (size_t n = 0; n < v.size(); ++n) {
    EXPECT_FALSE(DecodeRecordValue(std::string_view(v.data(), n), 1).ok()) << "length " << n;
  }
  EXPECT_FALSE(DecodeRecordValue(v + "x", 1).ok());
  for (int f = 0; f < 256; ++f) {
    if (f == 2) continue;
    std::string w = v;
    w[0] = static_cast<char>(f);
    EXPECT_FALSE(DecodeRecordValue(w, 1).ok()) << "format " << f;
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) {
    std::string g(rng() % 200, '\0');
    for (char& c : g) c = static_cast<char>(rng());
    (void)DecodeRecordValue(g, 1);  // must not crash; nearly always refused
  }
}

}  // namespace
}  // namespace kvfs::cluster
