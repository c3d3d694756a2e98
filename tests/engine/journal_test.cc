#include "journal.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "fillable_fs.h"
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

uint64_t FileSize(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// Writes three batches (ids 10, 11, 12) into journal `number` and returns each record's end.
std::vector<uint64_t> WriteThree(const std::string& dir, uint64_t number = 1) {
  auto j = Journal::Create(Fs(), dir, number);
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
  auto scan = Journal::Scan(Fs(), dir.path() + "/" + Journal::FileName(1));
  ASSERT_TRUE(scan.ok());
  EXPECT_TRUE(scan->header_ok);
  EXPECT_FALSE(scan->torn_tail());
  EXPECT_TRUE(scan->damaged.empty());
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
  auto state = Recover(Fs(), dir.path());
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_TRUE(state->truncated);
  EXPECT_FALSE(state->damage.any());  // a torn tail is what a crash leaves: not damage
  EXPECT_EQ(state->records.size(), 2u);
  EXPECT_TRUE(state->records.count(10) && state->records.count(11));
  EXPECT_GE(state->next_id, 12u);
  // The engine appends after the last valid record: the torn bytes go.
  auto j =
      Journal::OpenForAppend(Fs(), dir.path(), state->journal_number, state->journal_valid_bytes);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(FileSize(path), ends[1]);
}

TEST(JournalTest, AnAppendWhoseSyncFailedIsCutOff) {
  // The bytes reached the file but fdatasync failed: the caller undoes the change, so the
  // journal must not keep it for a later recovery to replay.
  TempDir dir;
  testing::FillableFileSystem fs;
  auto j = Journal::Create(fs, dir.path(), 1);
  ASSERT_TRUE(j.ok());
  MetaBatch first, failed, next;
  first.puts.push_back(Dir(10, "kept"));
  failed.puts.push_back(Dir(11, "undone"));
  next.puts.push_back(Dir(12, "next"));
  ASSERT_TRUE((*j)->AppendDurable(BatchRecord(first)).ok());
  const uint64_t good = (*j)->size();
  fs.fail_sync = true;
  EXPECT_EQ((*j)->AppendDurable(BatchRecord(failed)).err(), EIO);
  fs.fail_sync = false;
  EXPECT_EQ((*j)->size(), good);
  ASSERT_TRUE((*j)->AppendDurable(BatchRecord(next)).ok());
  auto state = Recover(Fs(), dir.path());
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_FALSE(state->damage.any());
  EXPECT_EQ(state->records.size(), 2u);
  EXPECT_TRUE(state->records.count(10) && state->records.count(12));
}

TEST(JournalTest, CorruptRecordInTheMiddleLosesOnlyThatRecord) {
  TempDir dir;
  auto ends = WriteThree(dir.path());
  const std::string path = dir.path() + "/" + Journal::FileName(1);
  FlipByte(path, ends[0] + 20);  // inside the second record's payload
  auto state = Recover(Fs(), dir.path());
  ASSERT_TRUE(state.ok());
  EXPECT_EQ(state->records.size(), 2u);
  EXPECT_TRUE(state->records.count(10) && state->records.count(12));
  EXPECT_EQ(state->damage.journal_records, 1u);
  EXPECT_EQ(state->damage.journal_bytes, ends[1] - ends[0]);
  ASSERT_EQ(state->damage.notes.size(), 1u);
  EXPECT_NE(state->damage.notes[0].find("damaged"), std::string::npos);
  EXPECT_EQ(state->journal_valid_bytes, ends[2]);  // appends go after the third record
  EXPECT_EQ(FileSize(path), ends[2]);
  // Ids the damaged record may have used are never handed out again.
  EXPECT_GT(state->next_id, 13u + 1000);
}

TEST(JournalTest, DamagedLengthFieldResyncsAtTheNextRecord) {
  TempDir dir;
  auto ends = WriteThree(dir.path());
  const std::string path = dir.path() + "/" + Journal::FileName(1);
  FlipByte(path, ends[0] + 1);  // the second record's length field
  auto state = Recover(Fs(), dir.path());
  ASSERT_TRUE(state.ok());
  EXPECT_TRUE(state->records.count(10) && state->records.count(12));
  EXPECT_FALSE(state->records.count(11));
  EXPECT_EQ(state->damage.journal_records, 1u);
}

TEST(JournalTest, CorruptLastRecordIsCutLikeATornTail) {
  TempDir dir;
  auto ends = WriteThree(dir.path());
  FlipByte(dir.path() + "/" + Journal::FileName(1), ends[1] + 20);
  auto state = Recover(Fs(), dir.path());
  ASSERT_TRUE(state.ok());
  EXPECT_TRUE(state->records.count(10) && state->records.count(11));
  EXPECT_FALSE(state->records.count(12));
  EXPECT_TRUE(state->truncated);
  EXPECT_EQ(state->journal_valid_bytes, ends[1]);
}

TEST(JournalTest, CheckpointPlusLaterJournalRecover) {
  TempDir dir;
  std::vector<ObjectRecord> snapshot = {Dir(5, "a"), Dir(6, "b")};
  {
    auto old = Journal::Create(Fs(), dir.path(), 1);  // superseded by the checkpoint
    MetaBatch b;
    b.puts.push_back(Dir(99, "stale"));
    ASSERT_TRUE((*old)->AppendDurable(BatchRecord(b)).ok());
  }
  ASSERT_TRUE(Checkpoint::Write(Fs(), dir.path(), 2, 1000, snapshot).ok());
  auto j = Journal::Create(Fs(), dir.path(), 2);
  MetaBatch b;
  b.puts.push_back(Dir(7, "c"));
  b.removes.push_back(5);
  ASSERT_TRUE((*j)->AppendDurable(BatchRecord(b)).ok());
  auto state = Recover(Fs(), dir.path());
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_EQ(state->records.size(), 2u);
  EXPECT_TRUE(state->records.count(6) && state->records.count(7));
  EXPECT_FALSE(state->records.count(99));  // journal 1 is before the checkpoint
  EXPECT_EQ(state->next_id, 1000u);        // the checkpoint's watermark
  EXPECT_EQ(state->journal_number, 2u);
  EXPECT_FALSE(state->damage.any());
}

TEST(JournalTest, CorruptCheckpointFallsBackToTheOneBefore) {
  TempDir dir;
  // Generation 1 (empty state) + journal 1 with ids 10..12, then a checkpoint of that
  // (generation 2) + journal 2 with id 20: the same state two ways.
  ASSERT_TRUE(Checkpoint::Write(Fs(), dir.path(), 1, 2, {}).ok());
  WriteThree(dir.path(), 1);
  ASSERT_TRUE(
      Checkpoint::Write(Fs(), dir.path(), 2, 100, {Dir(10, "d10"), Dir(11, "d11"), Dir(12, "d12")})
          .ok());
  {
    auto j = Journal::Create(Fs(), dir.path(), 2);
    MetaBatch b;
    b.puts.push_back(Dir(20, "d20"));
    ASSERT_TRUE((*j)->AppendDurable(BatchRecord(b)).ok());
  }
  ASSERT_TRUE(Checkpoint::Prune(Fs(), dir.path()).ok());     // keeps both and journal 1
  FlipByte(dir.path() + "/" + Checkpoint::FileName(2), 70);  // its one block's header
  auto loaded = Checkpoint::Load(Fs(), dir.path(), Checkpoint::FileName(2));
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_FALSE(loaded->whole());
  EXPECT_EQ(loaded->lost_records, 3u);
  EXPECT_TRUE(loaded->records.empty());
  auto state = Recover(Fs(), dir.path());
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_EQ(state->records.size(), 4u);
  for (ObjectId id : {10, 11, 12, 20}) EXPECT_TRUE(state->records.count(id)) << id;
  EXPECT_EQ(state->damage.checkpoints, 1u);
  EXPECT_EQ(state->journal_number, 2u);
}

TEST(JournalTest, NoCheckpointVerifiesStillStartsFromTheJournals) {
  TempDir dir;
  WriteThree(dir.path(), 3);
  ASSERT_TRUE(Checkpoint::Write(Fs(), dir.path(), 3, 50, {Dir(5, "only-here")}).ok());
  FlipByte(dir.path() + "/" + Checkpoint::FileName(3), 10);
  auto state = Recover(Fs(), dir.path());
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_EQ(state->records.size(), 3u);  // what the journal holds; "only-here" is lost
  EXPECT_EQ(state->damage.checkpoints, 1u);
  EXPECT_EQ(state->damage.notes.size(), 2u);
}

TEST(JournalTest, LegacyCheckpointNameIsRead) {
  TempDir dir;
  ASSERT_TRUE(Checkpoint::Write(Fs(), dir.path(), 1, 10, {Dir(5, "a")}).ok());
  ASSERT_EQ(::rename((dir.path() + "/" + Checkpoint::FileName(1)).c_str(),
                     (dir.path() + "/checkpoint").c_str()),
            0);
  auto state = Recover(Fs(), dir.path());
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_TRUE(state->records.count(5));
  EXPECT_FALSE(state->fresh);
}

TEST(JournalTest, HeaderlessLastJournalIsDroppedAndTheOneBeforeContinues) {
  TempDir dir;
  auto ends = WriteThree(dir.path(), 1);
  // A checkpoint's new journal whose header never made it (no space, or a crash).
  const std::string empty = dir.path() + "/" + Journal::FileName(2);
  ::close(::open(empty.c_str(), O_CREAT | O_WRONLY, 0600));
  auto state = Recover(Fs(), dir.path());
  ASSERT_TRUE(state.ok()) << state.status().ToString();
  EXPECT_EQ(state->records.size(), 3u);
  EXPECT_EQ(state->journal_number, 1u);
  EXPECT_EQ(state->journal_valid_bytes, ends[2]);
  EXPECT_FALSE(state->damage.any());
  EXPECT_NE(::access(empty.c_str(), F_OK), 0);
}

TEST(JournalTest, PruneKeepsTwoGenerationsAndTheirJournals) {
  TempDir dir;
  for (uint64_t g = 1; g <= 4; ++g) {
    ASSERT_TRUE(Journal::Create(Fs(), dir.path(), g).ok());
    ASSERT_TRUE(Checkpoint::Write(Fs(), dir.path(), g, 10, {}).ok());
  }
  ASSERT_TRUE(Checkpoint::Prune(Fs(), dir.path()).ok());
  auto checkpoints = Checkpoint::List(Fs(), dir.path());
  ASSERT_TRUE(checkpoints.ok());
  EXPECT_EQ(*checkpoints,
            (std::vector<std::string>{Checkpoint::FileName(4), Checkpoint::FileName(3)}));
  auto journals = Journal::List(Fs(), dir.path());
  ASSERT_TRUE(journals.ok());
  EXPECT_EQ(*journals, (std::vector<uint64_t>{3, 4}));
}

}  // namespace
}  // namespace kvfs
