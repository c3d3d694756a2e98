// Checkpoint blocks: a flipped bit, a damaged block header or a cut file costs the records of
// the blocks it hit, and recovery takes what one checkpoint lost from the other and the
// journals (recovery.cc's Salvage). The fallback to a whole older checkpoint is in
// journal_test.cc.
#include "checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <xxhash.h>

#include <map>
#include <random>
#include <set>

#include "byte_io.h"
#include "journal.h"
#include "metadata_files.h"
#include "record_codec.h"
#include "recovery.h"
#include "temp_dir.h"

namespace kvfs {
namespace {

using testing::BatchRecord;
using testing::Dir;
using testing::FlipByte;
using testing::Fs;
using testing::TempDir;

constexpr size_t kHeaderSize = 64;
constexpr size_t kBlockHeaderSize = 32;

std::vector<ObjectRecord> Dirs(ObjectId first, size_t n) {
  std::vector<ObjectRecord> out;
  for (ObjectId id = first; id < first + n; ++id)
    out.push_back(Dir(id, "dir-" + std::to_string(id)));
  return out;
}

std::string ReadAll(const std::string& path) {
  std::string out;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  char buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) out.append(buf, n);
  std::fclose(f);
  return out;
}

// A block of a version 2 checkpoint file as written: where it is and the ids it holds.
struct Block {
  uint64_t offset = 0;
  uint32_t length = 0;
  std::set<ObjectId> ids;
};

std::vector<Block> Blocks(const std::string& path) {
  const std::string data = ReadAll(path);
  std::vector<Block> out;
  for (size_t at = kHeaderSize; at + kBlockHeaderSize <= data.size();) {
    ByteReader r(data.data() + at + 8, 8);
    Block b;
    b.offset = at;
    const uint32_t count = r.U32();
    b.length = r.U32();
    ByteReader body(data.data() + at + kBlockHeaderSize, b.length);
    for (uint32_t i = 0; i < count; ++i) {
      DecodedRecord d;
      EXPECT_TRUE(RecordCodec::DecodeRecord(body, &d));
      b.ids.insert(d.record.id);
    }
    out.push_back(std::move(b));
    at += kBlockHeaderSize + b.length;
  }
  return out;
}

std::set<ObjectId> Ids(const CheckpointData& c) {
  std::set<ObjectId> out;
  for (const DecodedRecord& d : c.records) out.insert(d.record.id);
  return out;
}

std::set<ObjectId> Minus(std::set<ObjectId> a, const std::set<ObjectId>& b) {
  for (ObjectId id : b) a.erase(id);
  return a;
}

class CheckpointBlocksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Checkpoint::Write(Fs(), dir_.path(), 1, 5000, Dirs(1000, 1000)).ok());
    blocks_ = Blocks(path());
    ASSERT_GE(blocks_.size(), 5u);  // about 4 KiB of records each
    for (const Block& b : blocks_) all_.insert(b.ids.begin(), b.ids.end());
    ASSERT_EQ(all_.size(), 1000u);
  }
  std::string path() const { return dir_.path() + "/" + Checkpoint::FileName(1); }
  CheckpointData Load() {
    auto c = Checkpoint::Load(Fs(), dir_.path(), Checkpoint::FileName(1));
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : CheckpointData{};
  }
  // Only the records of block `i` are gone, and counted.
  void ExpectOnlyBlockLost(size_t i) {
    CheckpointData c = Load();
    EXPECT_FALSE(c.whole());
    EXPECT_EQ(c.lost_records, blocks_[i].ids.size());
    EXPECT_EQ(Ids(c), Minus(all_, blocks_[i].ids));
    EXPECT_EQ(c.first_damage, blocks_[i].offset);
    EXPECT_EQ(c.next_id, 5000u);
  }

  TempDir dir_;
  std::vector<Block> blocks_;
  std::set<ObjectId> all_;
};

TEST_F(CheckpointBlocksTest, AWholeFileLoadsEveryRecord) {
  CheckpointData c = Load();
  EXPECT_TRUE(c.whole());
  EXPECT_EQ(Ids(c), all_);
}

TEST_F(CheckpointBlocksTest, AFlippedBitInABodyCostsThatBlock) {
  FlipByte(path(), blocks_[2].offset + kBlockHeaderSize + blocks_[2].length / 2);
  ExpectOnlyBlockLost(2);
  EXPECT_EQ(Load().damaged_bytes, kBlockHeaderSize + blocks_[2].length);
}

TEST_F(CheckpointBlocksTest, ADamagedBlockHeaderIsSteppedOverToTheNextBlock) {
  for (uint64_t at :
       {uint64_t{0}, uint64_t{9}, uint64_t{13}, uint64_t{30}}) {  // magic, count, length, sum
    SCOPED_TRACE(at);
    ASSERT_TRUE(Checkpoint::Write(Fs(), dir_.path(), 1, 5000, Dirs(1000, 1000)).ok());
    FlipByte(path(), blocks_[3].offset + at);
    ExpectOnlyBlockLost(3);
  }
}

TEST_F(CheckpointBlocksTest, ACutFileKeepsTheBlocksBeforeTheCut) {
  ASSERT_EQ(::truncate(path().c_str(), static_cast<off_t>(blocks_[2].offset + 100)), 0);
  CheckpointData c = Load();
  std::set<ObjectId> kept = blocks_[0].ids;
  kept.insert(blocks_[1].ids.begin(), blocks_[1].ids.end());
  EXPECT_EQ(Ids(c), kept);
  EXPECT_EQ(c.lost_records, 1000 - kept.size());
  EXPECT_EQ(c.first_damage, blocks_[2].offset);
}

TEST_F(CheckpointBlocksTest, ADamagedFileHeaderIsAnError) {
  FlipByte(path(), 40);  // the record count
  auto c = Checkpoint::Load(Fs(), dir_.path(), Checkpoint::FileName(1));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().err(), EIO);
}

// Hostile damage: random flips, cut ends, garbage appended, a block moved. A load never fails
// once the header verifies, never returns a record that was not written, and accounts for
// every record it leaves out.
TEST_F(CheckpointBlocksTest, RandomDamageNeverYieldsARecordThatWasNotWritten) {
  std::map<ObjectId, std::string> written;
  for (const ObjectRecord& r : Dirs(1000, 1000)) written[r.id] = r.name;
  std::mt19937_64 rng(20261208);
  for (int round = 0; round < 200; ++round) {
    SCOPED_TRACE(round);
    ASSERT_TRUE(Checkpoint::Write(Fs(), dir_.path(), 1, 5000, Dirs(1000, 1000)).ok());
    std::string data = ReadAll(path());
    const int flips = 1 + static_cast<int>(rng() % 40);
    for (int i = 0; i < flips; ++i) {
      data[kHeaderSize + rng() % (data.size() - kHeaderSize)] ^= static_cast<char>(1 + rng() % 255);
    }
    switch (rng() % 4) {
      case 0:
        data.resize(kHeaderSize + rng() % (data.size() - kHeaderSize));
        break;
      case 1:
        data.append(data, kHeaderSize + rng() % (data.size() - kHeaderSize), 100);
        break;
      case 2: {  // a whole block written again elsewhere: it verifies, and adds nothing wrong
        const Block& b = blocks_[rng() % blocks_.size()];
        data.insert(kHeaderSize + rng() % (data.size() - kHeaderSize),
                    ReadAll(path()).substr(b.offset, kBlockHeaderSize + b.length));
        break;
      }
      default:
        break;
    }
    FILE* f = std::fopen(path().c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(std::fwrite(data.data(), 1, data.size(), f), data.size());
    std::fclose(f);
    auto c = Checkpoint::Load(Fs(), dir_.path(), Checkpoint::FileName(1));
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_FALSE(c->whole());
    for (const DecodedRecord& d : c->records) {
      auto it = written.find(d.record.id);
      ASSERT_NE(it, written.end()) << d.record.id;
      EXPECT_EQ(d.record.name, it->second);
    }
    EXPECT_LE(c->records.size(), 1000u + blocks_.front().ids.size() * 2);
  }
}

// A stale sector or a misdirected write: a block of another generation, even of the same
// records, does not verify in this one (its sums are seeded with the generation).
TEST_F(CheckpointBlocksTest, ABlockOfAnotherGenerationDoesNotVerify) {
  ASSERT_TRUE(Checkpoint::Write(Fs(), dir_.path(), 2, 5000, Dirs(1000, 1000)).ok());
  std::string data = ReadAll(path());
  const std::string other = ReadAll(dir_.path() + "/" + Checkpoint::FileName(2));
  const Block& b = blocks_[1];
  ASSERT_EQ(Blocks(dir_.path() + "/" + Checkpoint::FileName(2))[1].offset, b.offset);
  ASSERT_NE(other.substr(b.offset, kBlockHeaderSize + b.length),
            data.substr(b.offset, kBlockHeaderSize + b.length));  // the sums differ
  data.replace(b.offset, kBlockHeaderSize + b.length,
               other.substr(b.offset, kBlockHeaderSize + b.length));
  FILE* f = std::fopen(path().c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(std::fwrite(data.data(), 1, data.size(), f), data.size());
  std::fclose(f);
  ExpectOnlyBlockLost(1);
}

// What kvfs wrote before the blocks: one checksum over the whole payload.
TEST(CheckpointVersion1, IsStillReadAndStillAllOrNothing) {
  TempDir dir;
  std::string payload;
  ByteWriter pw(&payload);
  for (const ObjectRecord& rec : Dirs(10, 3)) RecordCodec::EncodeRecord(rec, pw);
  std::string file;
  ByteWriter w(&file);
  w.U64(0x31504b435346564bull);
  w.U32(1);
  w.U32(0);
  w.U64(7);
  w.U64(100);
  w.U64(3);
  w.U64(payload.size());
  w.U64(XXH3_64bits(payload.data(), payload.size()));
  w.U64(XXH3_64bits(file.data(), file.size()));
  file += payload;
  ASSERT_TRUE(Checkpoint::Install(Fs(), dir.path(), 7, file).ok());
  auto c = Checkpoint::Load(Fs(), dir.path(), Checkpoint::FileName(7));
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->whole());
  EXPECT_EQ(Ids(*c), (std::set<ObjectId>{10, 11, 12}));
  EXPECT_EQ(c->first_journal, 7u);
  EXPECT_EQ(c->next_id, 100u);
  FlipByte(dir.path() + "/" + Checkpoint::FileName(7), file.size() - 2);
  EXPECT_FALSE(Checkpoint::Load(Fs(), dir.path(), Checkpoint::FileName(7)).ok());
}

// Both kept checkpoints damaged. Generation 1: dirs 1000..1999. Journal 1: 1000 removed, 1500
// renamed, 3000 added. Generation 2: that state. Journal 2: 4000 added.
class BothCheckpointsDamagedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(Checkpoint::Write(Fs(), dir_.path(), 1, 5000, Dirs(1000, 1000)).ok());
    Append(1, {Dir(3000, "new-in-1"), Dir(1500, "renamed-in-1")}, {1000});
    std::vector<ObjectRecord> state = Dirs(1001, 999);
    state[499] = Dir(1500, "renamed-in-1");
    state.push_back(Dir(3000, "new-in-1"));
    ASSERT_TRUE(Checkpoint::Write(Fs(), dir_.path(), 2, 5000, state).ok());
    Append(2, {Dir(4000, "new-in-2")}, {});
    state.push_back(Dir(4000, "new-in-2"));
    for (const ObjectRecord& r : state) expected_[r.id] = r.name;
    older_ = Blocks(Path(1));
    newer_ = Blocks(Path(2));
  }
  void Append(uint64_t number, std::vector<ObjectRecord> puts, std::vector<ObjectId> removes) {
    auto j = Journal::Create(Fs(), dir_.path(), number);
    ASSERT_TRUE(j.ok());
    MetaBatch b;
    b.puts = std::move(puts);
    b.removes = std::move(removes);
    ASSERT_TRUE((*j)->AppendDurable(BatchRecord(b)).ok());
  }
  std::string Path(uint64_t generation) const {
    return dir_.path() + "/" + Checkpoint::FileName(generation);
  }
  void FlipBody(uint64_t generation, const Block& b) {
    FlipByte(Path(generation), b.offset + kBlockHeaderSize + b.length / 2);
  }
  // Recovers, and checks that exactly `lost` is missing from the state the files describe.
  void ExpectRecoveredAllBut(const std::set<ObjectId>& lost) {
    auto st = Recover(Fs(), dir_.path());
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    std::map<ObjectId, std::string> got;
    for (const auto& [id, entry] : st->records) got[id] = entry.record.name;
    std::map<ObjectId, std::string> want = expected_;
    for (ObjectId id : lost) want.erase(id);
    EXPECT_EQ(got, want);
    EXPECT_EQ(st->damage.checkpoints, 2u);
    EXPECT_GE(st->next_id, 5000u);
    EXPECT_EQ(st->journal_number, 2u);
    ASSERT_FALSE(st->damage.notes.empty());
    EXPECT_NE(st->damage.notes.back().find(std::to_string(lost.size()) + " are lost"),
              std::string::npos)
        << st->damage.notes.back();
  }

  TempDir dir_;
  std::map<ObjectId, std::string> expected_;
  std::vector<Block> older_;
  std::vector<Block> newer_;
};

TEST_F(BothCheckpointsDamagedTest, DamageInDifferentBlocksLosesNothing) {
  FlipBody(2, newer_[0]);
  FlipBody(1, older_.back());
  ASSERT_TRUE(std::set<ObjectId>(newer_[0].ids).count(1001));
  ExpectRecoveredAllBut({});
}

TEST_F(BothCheckpointsDamagedTest, DamageInTheSameRecordsLosesOnlyThose) {
  FlipBody(2, newer_[0]);
  FlipBody(1, older_[0]);
  std::set<ObjectId> both;
  for (ObjectId id : newer_[0].ids) {
    if (older_[0].ids.count(id)) both.insert(id);
  }
  ASSERT_FALSE(both.empty());
  ASSERT_LT(both.size(), newer_[0].ids.size() + 1);
  ExpectRecoveredAllBut(both);
}

TEST_F(BothCheckpointsDamagedTest, AnOlderCheckpointThatCannotBeReadLeavesTheJournals) {
  FlipByte(Path(1), 10);  // its header: nothing of it is used
  const Block* hit = nullptr;
  for (const Block& b : newer_) {
    if (b.ids.count(1500) && b.ids.count(1501)) hit = &b;  // the rename journal 1 holds
  }
  ASSERT_NE(hit, nullptr);
  FlipBody(2, *hit);
  std::set<ObjectId> lost = hit->ids;
  lost.erase(1500);  // journal 1 has it whole
  ExpectRecoveredAllBut(lost);
}

// The newest checkpoint's journal never made it (a crash right after the checkpoint): appends
// go on in a new journal of that number, not at the end of the journal replayed before it.
TEST_F(BothCheckpointsDamagedTest, WithoutTheNewestJournalAppendsStartANewOne) {
  ASSERT_EQ(::unlink((dir_.path() + "/" + Journal::FileName(2)).c_str()), 0);
  expected_.erase(4000);
  FlipBody(2, newer_[0]);
  FlipBody(1, older_.back());
  auto st = Recover(Fs(), dir_.path());
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->records.size(), expected_.size());
  EXPECT_EQ(st->journal_number, 2u);
  EXPECT_EQ(st->journal_valid_bytes, 0u);
}

}  // namespace
}  // namespace kvfs
