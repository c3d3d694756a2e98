#include "recovery.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <unordered_set>

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

// A checkpoint as recovery found it: `data` holds what verified (an error: nothing did).
struct LoadedCheckpoint {
  std::string name;
  Result<CheckpointData> data;
};

std::string Describe(const LoadedCheckpoint& c) {
  if (!c.data.ok()) return c.name + " cannot be used (" + c.data.status().message() + ")";
  return c.name + ": " + std::to_string(c.data->lost_records) + " of " +
         std::to_string(c.data->lost_records + c.data->records.size()) +
         " records are in damaged blocks (" + std::to_string(c.data->damaged_bytes) +
         " bytes from offset " + std::to_string(c.data->first_damage) + ")";
}

void PutCheckpoint(RecoveredState& st, CheckpointData& c, uint64_t sequence) {
  st.next_id = std::max(st.next_id, c.next_id);
  for (auto& d : c.records) PutEntry(st, std::move(d), sequence);
}

// Replays the journals numbered [from, until) into `st`; `journals` is every journal there is.
Status ReplayJournals(FileSystem& fs, const std::string& dir, const std::vector<uint64_t>& journals,
                      uint64_t from, uint64_t until, RecoveredState& st, uint64_t& sequence) {
  for (size_t i = 0; i < journals.size(); ++i) {
    const uint64_t number = journals[i];
    const bool last = i + 1 == journals.size();
    const std::string path = dir + "/" + Journal::FileName(number);
    if (number < from || number >= until) {
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
  return Status::Ok();
}

// No checkpoint is whole. Every record the checkpoints kept readable is still worth having:
// the journals before a checkpoint (whole records, replayed over the checkpoint before it, or
// over nothing) describe a subset of the state that checkpoint was written from, with the
// values it had then. So each checkpoint's verified blocks are laid over that, oldest first,
// and its damaged blocks cost only the records missing from both.
Status Salvage(FileSystem& fs, const std::string& dir, std::vector<LoadedCheckpoint>& found,
               const std::vector<uint64_t>& journals, RecoveredState& st) {
  uint64_t sequence = 0;
  uint64_t from = journals.empty() ? 1 : journals.front();
  // The newest checkpoint whose header verifies: its note says what is lost for good.
  size_t newest = found.size();
  for (size_t i = found.size(); i-- > 0;) {
    if (found[i].data.ok()) newest = i;
  }
  for (size_t i = found.size(); i-- > 0;) {  // oldest first
    ++st.damage.checkpoints;
    if (!found[i].data.ok()) {
      NoteDamage(st, Describe(found[i]));
      continue;
    }
    CheckpointData& c = *found[i].data;
    KVFS_RETURN_IF_ERROR(ReplayJournals(fs, dir, journals, from, c.first_journal, st, sequence));
    if (i != newest) {
      NoteDamage(st, Describe(found[i]));
    } else {
      // The newest's damaged records that nothing older holds are the loss.
      std::unordered_set<ObjectId> verified;
      for (const DecodedRecord& d : c.records) verified.insert(d.record.id);
      uint64_t found_elsewhere = 0;
      for (const auto& [id, entry] : st.records) found_elsewhere += verified.count(id) == 0;
      found_elsewhere = std::min(found_elsewhere, c.lost_records);
      NoteDamage(st, Describe(found[i]) + "; " + std::to_string(found_elsewhere) +
                         " of them were found in an older checkpoint or journal, " +
                         std::to_string(c.lost_records - found_elsewhere) + " are lost");
    }
    PutCheckpoint(st, c, ++sequence);
    from = c.first_journal;
  }
  if (newest == found.size() && !found.empty()) {
    NoteDamage(st,
               "no checkpoint verifies: replaying every journal there is; files that only "
               "a checkpoint described are lost");
  }
  // Appends go on in the newest journal from `from` on; when there is none (its creation did
  // not finish), in a new one, not at the end of one replayed before the checkpoint.
  st.journal_number = from;
  st.journal_valid_bytes = 0;
  return ReplayJournals(fs, dir, journals, from, UINT64_MAX, st, sequence);
}

void LeaveIdGap(RecoveredState& st) {
  if (st.damage.journal_records > 0) st.next_id += kIdGapAfterDamage;
}

}  // namespace

Result<RecoveredState> Recover(FileSystem& fs, const std::string& dir) {
  RecoveredState st;
  st.next_id = kRootId + 1;
  KVFS_ASSIGN_OR_RETURN(std::vector<std::string> checkpoints, Checkpoint::List(fs, dir));
  KVFS_ASSIGN_OR_RETURN(std::vector<uint64_t> journals, Journal::List(fs, dir));
  st.fresh = checkpoints.empty() && journals.empty();
  st.journal_valid_bytes = 0;
  std::vector<LoadedCheckpoint> found;  // newest first
  for (const std::string& name : checkpoints) {
    found.push_back({name, Checkpoint::Load(fs, dir, name)});
    CheckpointData* c = found.back().data.ok() ? &*found.back().data : nullptr;
    if (c == nullptr || !c->whole()) continue;
    // The newest whole checkpoint: the newer, damaged ones are only reported, since this one
    // and more journal describe the same state.
    for (size_t i = 0; i + 1 < found.size(); ++i) {
      ++st.damage.checkpoints;
      NoteDamage(st, Describe(found[i]) + "; falling back to an older checkpoint and more journal");
    }
    if (found.size() > 1) spdlog::warn("engine: recovery: using {}", name);
    PutCheckpoint(st, *c, 0);
    st.journal_number = c->first_journal;
    uint64_t sequence = 0;
    KVFS_RETURN_IF_ERROR(
        ReplayJournals(fs, dir, journals, c->first_journal, UINT64_MAX, st, sequence));
    LeaveIdGap(st);
    return st;
  }
  KVFS_RETURN_IF_ERROR(Salvage(fs, dir, found, journals, st));
  LeaveIdGap(st);
  return st;
}

}  // namespace kvfs
