#include "recovery.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "byte_io.h"
#include "checkpoint.h"
#include "journal.h"
#include "record_codec.h"

namespace kvfs {
namespace {

// Ids a skipped record may have used are never handed out again: a generous step past the
// highest id seen.
constexpr uint64_t kIdGapAfterDamage = 1ull << 20;

void PutEntry(RecoveredState& st, DecodedRecord&& d, uint64_t sequence) {
  st.next_id = std::max(st.next_id, d.record.id + 1);
  RecoveredState::Entry e;
  e.record = std::move(d.record);
  e.layout = std::move(d.layout);
  e.sequence = sequence;
  const ObjectId id = e.record.id;
  st.records[id] = std::move(e);
}

void NoteDamage(RecoveredState& st, std::string note) {
  spdlog::error("engine: recovery: {}", note);
  st.damage.notes.push_back(std::move(note));
}

// Loads the newest checkpoint that verifies; returns the first journal to replay (0: none
// found, replay every journal there is).
uint64_t LoadCheckpoint(FileSystem& fs, const std::string& dir, RecoveredState& st,
                        const std::vector<std::string>& names) {
  for (const std::string& name : names) {
    auto ckpt = Checkpoint::Load(fs, dir, name);
    if (!ckpt.ok()) {
      ++st.damage.checkpoints;
      NoteDamage(st, name + " cannot be used (" + ckpt.status().message() +
                         "); falling back to an older checkpoint and more journal");
      continue;
    }
    st.next_id = std::max(st.next_id, ckpt->next_id);
    for (auto& d : ckpt->records) PutEntry(st, std::move(d), 0);
    if (name != names.front()) spdlog::warn("engine: recovery: using {}", name);
    return ckpt->first_journal;
  }
  if (!names.empty()) {
    NoteDamage(st,
               "no checkpoint verifies: replaying every journal there is; files that only "
               "a checkpoint described are lost");
  }
  return 0;
}

}  // namespace

Result<RecoveredState> Recover(FileSystem& fs, const std::string& dir) {
  RecoveredState st;
  st.next_id = kRootId + 1;
  KVFS_ASSIGN_OR_RETURN(std::vector<std::string> checkpoints, Checkpoint::List(fs, dir));
  KVFS_ASSIGN_OR_RETURN(std::vector<uint64_t> journals, Journal::List(fs, dir));
  st.fresh = checkpoints.empty() && journals.empty();
  uint64_t first_journal = LoadCheckpoint(fs, dir, st, checkpoints);
  if (first_journal == 0) first_journal = journals.empty() ? 1 : journals.front();

  st.journal_number = first_journal;
  st.journal_valid_bytes = 0;
  uint64_t sequence = 0;
  for (size_t i = 0; i < journals.size(); ++i) {
    const uint64_t number = journals[i];
    const bool last = i + 1 == journals.size();
    const std::string path = dir + "/" + Journal::FileName(number);
    if (number < first_journal) {
      // Before the checkpoint in use, kept for an older one (Checkpoint::Prune): not replayed.
      continue;
    }
    KVFS_ASSIGN_OR_RETURN(JournalScan scan, Journal::Scan(fs, path));
    if (!scan.header_ok) {
      if (last && scan.file_bytes < Journal::kHeaderSize) {
        // A journal whose creation did not finish (no space for its header, or a crash):
        // there is nothing in it; appends go on in the journal before it.
        spdlog::warn("engine: removing {} ({} bytes, no header)", path, scan.file_bytes);
        (void)fs.Unlink(path);
        continue;
      }
      ++st.damage.journal_records;
      st.damage.journal_bytes += scan.file_bytes;
      NoteDamage(st, path + " has a damaged header: its " + std::to_string(scan.file_bytes) +
                         " bytes are skipped");
      continue;
    }
    for (const auto& [begin, end] : scan.damaged) {
      ++st.damage.journal_records;
      st.damage.journal_bytes += end - begin;
      NoteDamage(st, path + ": bytes " + std::to_string(begin) + ".." + std::to_string(end) +
                         " are damaged; the change they held is lost, the records after "
                         "them are replayed");
    }
    for (JournalRecord& rec : scan.records) {
      ++sequence;
      if (rec.type == RecordType::kWatermark) {
        ByteReader r(rec.payload.data(), rec.payload.size());
        const uint64_t mark = r.U64();
        if (r.ok()) st.next_id = std::max(st.next_id, mark);
        continue;
      }
      DecodedBatch batch;
      if (Status s = RecordCodec::DecodeBatch(rec.payload, &batch); !s.ok()) {
        // Checksummed yet undecodable: written by a broken engine. Skipped like damage.
        ++st.damage.journal_records;
        st.damage.journal_bytes += rec.end - rec.offset;
        NoteDamage(st, path + ": record at " + std::to_string(rec.offset) + " does not decode (" +
                           s.message() + "); skipped");
        continue;
      }
      for (ObjectId id : batch.removes) {
        st.records.erase(id);
        st.next_id = std::max(st.next_id, id + 1);
      }
      for (auto& d : batch.puts) PutEntry(st, std::move(d), sequence);
      ++st.replayed_records;
    }
    if (scan.torn_tail()) {
      if (last) {
        spdlog::warn("engine: {}: cutting {} bytes of torn tail at offset {}", path,
                     scan.file_bytes - scan.valid_bytes, scan.valid_bytes);
        st.truncated = true;
      } else {
        // Only the last journal is ever appended to when a crash can strike.
        ++st.damage.journal_records;
        st.damage.journal_bytes += scan.file_bytes - scan.valid_bytes;
        NoteDamage(st, path + ": " + std::to_string(scan.file_bytes - scan.valid_bytes) +
                           " damaged bytes at its end are skipped");
      }
    }
    st.journal_number = number;
    st.journal_valid_bytes = scan.valid_bytes;
  }
  if (st.damage.journal_records > 0) st.next_id += kIdGapAfterDamage;
  return st;
}

}  // namespace kvfs
