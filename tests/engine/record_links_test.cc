// Hard links and special files in the engine's records: the extension of the record encoding
// (rdev, extra names) round-trips, leaves the encoding of plain records as it was, rejects
// malformed counts; the engine validates and keeps them across a restart.
#include <gtest/gtest.h>

#include <map>

#include "local_engine_test_util.h"
#include "record_bytes.h"
#include "temp_dir.h"

namespace kvfs {
namespace {

using local_engine_test::FileRecord;
using local_engine_test::OpenOk;
using local_engine_test::Opts;
using local_engine_test::RecordsById;
using record_test::Decode;
using record_test::Encode;
using testing::TempDir;

ObjectRecord Special(ObjectId id, ObjectType type, uint64_t rdev) {
  ObjectRecord r;
  r.id = id;
  r.parent = kRootId;
  r.name = "node" + std::to_string(id);
  r.type = type;
  r.mode = 0640;
  r.set_rdev(rdev);
  return r;
}

TEST(RecordLinksTest, ExtensionsRoundTrip) {
  ObjectRecord rec = Special(9, ObjectType::kCharDevice, (1ull << 40) | 3);
  rec.extra_links = {{5, "second"}, {kRootId, std::string(255, 'x')}};
  ObjectRecord back;
  ASSERT_TRUE(Decode(Encode(rec), &back));
  EXPECT_EQ(back.type, ObjectType::kCharDevice);
  EXPECT_EQ(back.rdev(), rec.rdev());
  EXPECT_EQ(back.extra_links, rec.extra_links);
  EXPECT_EQ(back.nlink(), 3u);
  EXPECT_EQ(back.name, rec.name);
  for (ObjectType t : {ObjectType::kFifo, ObjectType::kBlockDevice, ObjectType::kSocket}) {
    ASSERT_TRUE(Decode(Encode(Special(10, t, 0)), &back));
    EXPECT_EQ(back.type, t);
  }
}

TEST(RecordLinksTest, PlainRecordsKeepTheirEncoding) {
  // A record without extensions has no flag in its type byte and nothing appended, so a kvfs
  // that predates hard links reads it (and this one reads what that one wrote).
  ObjectRecord plain = FileRecord(4, "f", nullptr);
  const std::string bytes = Encode(plain);
  const size_t type_at = 8 + 8 + 4 + plain.name.size();
  EXPECT_EQ(static_cast<uint8_t>(bytes[type_at]), static_cast<uint8_t>(ObjectType::kFile));
  ObjectRecord linked = plain;
  linked.extra_links = {{kRootId, "g"}};
  const std::string more = Encode(linked);
  EXPECT_EQ(static_cast<uint8_t>(more[type_at]) & 0x80, 0x80);
  EXPECT_EQ(more.substr(type_at + 1, bytes.size() - type_at - 1),
            bytes.substr(type_at + 1));  // the same fields, then the extensions
}

TEST(RecordLinksTest, MalformedExtensionsAreRejected) {
  ObjectRecord rec = FileRecord(4, "f", nullptr);
  rec.extra_links = {{kRootId, "g"}};
  std::string bytes = Encode(rec);
  ObjectRecord back;
  // A link count the remaining bytes cannot hold.
  std::string huge = bytes;
  const size_t count_at = bytes.size() - (8 + 4 + 1) - 4;  // before the one link
  huge[count_at + 3] = '\x7f';
  EXPECT_FALSE(Decode(huge, &back));
  // Truncated anywhere in the extensions.
  for (size_t cut = bytes.size() - 25; cut < bytes.size(); ++cut)
    EXPECT_FALSE(Decode(bytes.substr(0, cut), &back)) << cut;
  // An unknown type.
  std::string bad_type = bytes;
  bad_type[8 + 8 + 4 + 1] = static_cast<char>(0x80 | 9);
  EXPECT_FALSE(Decode(bad_type, &back));
}

TEST(RecordLinksTest, EngineValidatesAndKeepsLinksAcrossRestart) {
  TempDir dir;
  {
    auto e = OpenOk(Opts(dir.path()));
    ASSERT_NE(e, nullptr);
    MetaBatch b;
    b.puts.push_back(Special(20, ObjectType::kFifo, 0));
    b.puts.push_back(Special(21, ObjectType::kBlockDevice, 0x801));
    ObjectRecord f = FileRecord(22, "file", nullptr);
    f.extra_links = {{kRootId, "file2"}, {kRootId, "file3"}};
    b.puts.push_back(f);
    ASSERT_TRUE(e->Apply(b).ok());

    MetaBatch bad_type;
    bad_type.puts.push_back(Special(23, static_cast<ObjectType>(8), 0));
    EXPECT_FALSE(e->Apply(bad_type).ok());
    MetaBatch linked_dir;
    ObjectRecord d = Special(24, ObjectType::kDirectory, 0);
    d.extra_links = {{kRootId, "d2"}};
    linked_dir.puts.push_back(d);
    EXPECT_FALSE(e->Apply(linked_dir).ok());
  }
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_NE(e, nullptr);
  std::map<ObjectId, ObjectRecord> by_id = RecordsById(*e);
  ASSERT_EQ(by_id.size(), 3u);
  EXPECT_EQ(by_id[20].type, ObjectType::kFifo);
  EXPECT_EQ(by_id[21].type, ObjectType::kBlockDevice);
  EXPECT_EQ(by_id[21].rdev(), 0x801u);
  EXPECT_EQ(by_id[22].nlink(), 3u);
  EXPECT_EQ(by_id[22].extra_links[1].name, "file3");
}

}  // namespace
}  // namespace kvfs
