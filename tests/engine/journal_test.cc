#include "journal.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "record_codec.h"
#include "recovery.h"
#include "temp_dir.h"

namespace kvfs {
namespace {

using testing::TempDir;

ObjectRecord Dir(ObjectId id, const std::string& name) {
  ObjectRecord r;
  r.id = id;
  r.parent = kRootId;
  r.name = name;
  r.type = ObjectType::kDirectory;
  r.mode = 0755;
  return r;
}

std::string BatchRecord(const MetaBatch& b) {
  std::string out;
  Journal::EncodeRecord(RecordType::kBatch, RecordCodec::EncodeBatch(b), &out);
  return out;
}

uint64_t FileSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

void FlipByte(const std::string& path, uint64_t offset) {
  int fd = ::open(path.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  char c = 0;
  ASSERT_EQ(::pread(fd, &c, 1, static_cast<off_t>(offset)), 1);
  c ^= 0x40;
  ASSERT_EQ(::pwrite(fd, &c, 1, static_cast<off_t>(offset)), 1);
  ::close(fd);
}

// Writes three batches (ids 10, 11, 12) into journal 1 and returns each record's end offset.
std::vector<uint64_t> WriteThree(const std::string& dir) {
  auto j = Journal::Create(dir, 1);
  EXPECT_TRUE(j.ok());
  std::vector<uint64_t> ends;
  for (ObjectId id : {10, 11, 12}) {
    MetaBatch b;
    b.puts.push_back(Dir(id, "d" + std::to_string(id)));
    EXPECT_TRUE((*j)->AppendDurable(BatchRecord(b)).ok());
    ends.push_back((*j)->size());
  }
  return ends;
}

TEST(JournalTest, RecordsRoundTrip) {
  TempDir dir;
  WriteThree(dir.path());
  auto scan = Journal::Scan(dir.path() + "/" + Journal::FileName(1));
  ASSERT_TRUE(scan.ok());
  EXPECT_TRUE(scan->clean());
  ASSERT_EQ(scan->records.size(), 3u);
  DecodedBatch b;
  ASSERT_TRUE(RecordCodec::DecodeBatch(scan->records[1].payload, &b).ok());
  ASSERT_EQ(b.puts.size(), 1u);
  EXPECT_EQ(b.puts[0].record.id, 11u);
  EXPECT_EQ(b.puts[0].record.name, "d11");
}

TEST(JournalTest, TornTailIsCutAtTheLastValidRecord) {
  TempDir dir;
  auto ends = WriteThree(dir.path());
  const std::string path = dir.path() + "/" + Journal::FileName(1);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(ends[2] - 5)), 0);  // torn third record
  auto state = Recover(dir.path());
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_TRUE(state->truncated);
  EXPECT_EQ(state->records.size(), 2u);
  EXPECT_TRUE(state->records.count(10) && state->records.count(11));
  EXPECT_EQ(FileSize(path), ends[1]);  // the torn bytes are gone from disk
  EXPECT_GE(state->next_id, 12u);
}

TEST(JournalTest, CorruptRecordInTheMiddleStopsReplayThere) {
  TempDir dir;
  auto ends = WriteThree(dir.path());
  const std::string path = dir.path() + "/" + Journal::FileName(1);
  FlipByte(path, ends[0] + 20);  // inside the second record's payload
  auto state = Recover(dir.path());
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->records.size(), 1u);
  EXPECT_TRUE(state->records.count(10));
  EXPECT_EQ(FileSize(path), ends[0]);
}

TEST(JournalTest, CheckpointPlusLaterJournalRecover) {
  TempDir dir;
  std::vector<ObjectRecord> snapshot = {Dir(5, "a"), Dir(6, "b")};
  ASSERT_TRUE(Checkpoint::Write(dir.path(), 2, 1000, snapshot).ok());
  {
    auto old = Journal::Create(dir.path(), 1);  // superseded by the checkpoint
    MetaBatch b;
    b.puts.push_back(Dir(99, "stale"));
    ASSERT_TRUE((*old)->AppendDurable(BatchRecord(b)).ok());
  }
  auto j = Journal::Create(dir.path(), 2);
  MetaBatch b;
  b.puts.push_back(Dir(7, "c"));
  b.removes.push_back(5);
  ASSERT_TRUE((*j)->AppendDurable(BatchRecord(b)).ok());
  auto state = Recover(dir.path());
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_EQ(state->records.size(), 2u);
  EXPECT_TRUE(state->records.count(6) && state->records.count(7));
  EXPECT_FALSE(state->records.count(99));
  EXPECT_EQ(state->next_id, 1000u);  // the checkpoint's watermark
  EXPECT_EQ(state->journal_number, 2u);
  EXPECT_FALSE(::access((dir.path() + "/" + Journal::FileName(1)).c_str(), F_OK) == 0);
}

TEST(JournalTest, CorruptCheckpointIsReported) {
  TempDir dir;
  ASSERT_TRUE(Checkpoint::Write(dir.path(), 1, 10, {Dir(5, "a")}).ok());
  FlipByte(dir.path() + "/checkpoint", 70);
  auto loaded = Checkpoint::Load(dir.path());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().err(), EIO);
  EXPECT_FALSE(Recover(dir.path()).ok());
}

}  // namespace
}  // namespace kvfs
