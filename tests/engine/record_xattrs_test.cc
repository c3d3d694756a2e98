// User xattrs in the engine's records: they round-trip (alone and after the link extensions),
// a record without them keeps its encoding, malformed lists (unsorted, foreign names, over the
// bound, truncated) are refused, and the engine refuses them too and keeps good ones across a
// restart.
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

const std::vector<Xattr> kTwo = {{"user.a", "1"}, {"user.b", std::string("\0\xff", 2)}};

TEST(RecordXattrsTest, RoundTripAloneAndAfterLinks) {
  ObjectRecord rec = FileRecord(4, "f", nullptr);
  rec.set_xattrs(kTwo);
  ObjectRecord back;
  ASSERT_TRUE(Decode(Encode(rec), &back));
  EXPECT_EQ(back.xattrs(), kTwo);
  rec.extra_links = {{kRootId, "g"}};
  rec.set_rdev(0);
  ASSERT_TRUE(Decode(Encode(rec), &back));
  EXPECT_EQ(back.xattrs(), kTwo);
  EXPECT_EQ(back.extra_links, rec.extra_links);
  // At the bound exactly.
  rec.set_xattrs({{"user.x", std::string(kMaxXattrBytes - 6, 'v')}});
  ASSERT_TRUE(Decode(Encode(rec), &back));
  EXPECT_EQ(back.xattrs(), rec.xattrs());
}

TEST(RecordXattrsTest, ARecordWithoutXattrsKeepsItsEncoding) {
  ObjectRecord plain = FileRecord(4, "f", nullptr);
  const std::string bytes = Encode(plain);
  ObjectRecord with = plain;
  with.set_xattrs(kTwo);
  const std::string more = Encode(with);
  const size_t type_at = 8 + 8 + 4 + plain.name.size();
  EXPECT_EQ(static_cast<uint8_t>(bytes[type_at]), static_cast<uint8_t>(ObjectType::kFile));
  EXPECT_EQ(static_cast<uint8_t>(more[type_at]), 0x40 | static_cast<uint8_t>(ObjectType::kFile));
  EXPECT_EQ(more.substr(type_at + 1, bytes.size() - type_at - 1), bytes.substr(type_at + 1));
  // Removing the last one frees the rare fields and gives the plain encoding back.
  with.set_xattrs({});
  EXPECT_FALSE(with.rare.allocated());
  EXPECT_EQ(Encode(with), bytes);
}

TEST(RecordXattrsTest, MalformedListsAreRefused) {
  ObjectRecord back;
  auto refused = [&](std::vector<Xattr> list) {
    ObjectRecord rec = FileRecord(4, "f", nullptr);
    rec.set_xattrs(std::move(list));  // not checked here: the decoder must refuse it
    return !Decode(Encode(rec), &back);
  };
  EXPECT_TRUE(refused({{"user.b", "1"}, {"user.a", "2"}}));  // unsorted
  EXPECT_TRUE(refused({{"user.a", "1"}, {"user.a", "2"}}));  // twice
  EXPECT_TRUE(refused({{"trusted.a", "1"}}));
  EXPECT_TRUE(refused({{"user.", "1"}}));
  EXPECT_TRUE(refused({{"user." + std::string(251, 'n'), ""}}));
  EXPECT_TRUE(refused({{"user.x", std::string(kMaxXattrBytes - 5, 'v')}}));  // one byte over
  EXPECT_FALSE(refused({{"user." + std::string(250, 'n'), ""}}));
  // Truncated anywhere in the list; the flag with a zero count.
  ObjectRecord rec = FileRecord(4, "f", nullptr);
  rec.set_xattrs(kTwo);
  const std::string bytes = Encode(rec);
  for (size_t cut = bytes.size() - 30; cut < bytes.size(); ++cut)
    EXPECT_FALSE(Decode(bytes.substr(0, cut), &back)) << cut;
  const size_t list_bytes = 2 + (4 + 6 + 4 + 1) + (4 + 6 + 4 + 2);
  std::string zero = bytes.substr(0, bytes.size() - list_bytes) + std::string(2, '\0');
  EXPECT_FALSE(Decode(zero, &back));
}

TEST(RecordXattrsTest, EngineKeepsXattrsAcrossRestart) {
  TempDir dir;
  {
    auto e = OpenOk(Opts(dir.path()));
    ASSERT_NE(e, nullptr);
    MetaBatch b;
    ObjectRecord f = FileRecord(22, "file", nullptr);
    f.set_xattrs(kTwo);
    b.puts.push_back(f);
    ObjectRecord g = FileRecord(23, "other", nullptr);
    g.set_xattrs({{"user.k", "v"}});
    b.puts.push_back(g);
    ASSERT_TRUE(e->Apply(b).ok());
    MetaBatch cleared;
    g.set_xattrs({});
    cleared.puts.push_back(g);
    ASSERT_TRUE(e->Apply(cleared).ok());
    // What the next start could not decode never reaches the journal.
    MetaBatch bad;
    ObjectRecord h = FileRecord(24, "bad", nullptr);
    h.set_xattrs({{"user.b", "1"}, {"user.a", "2"}});
    bad.puts.push_back(h);
    EXPECT_FALSE(e->Apply(bad).ok());
  }
  auto e = OpenOk(Opts(dir.path()));
  ASSERT_NE(e, nullptr);
  std::map<ObjectId, ObjectRecord> by_id = RecordsById(*e);
  ASSERT_EQ(by_id.size(), 2u);
  EXPECT_EQ(by_id[22].xattrs(), kTwo);
  EXPECT_TRUE(by_id[23].xattrs().empty());
}

}  // namespace
}  // namespace kvfs
