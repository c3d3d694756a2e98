#include "recovery.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>

#include "byte_io.h"
#include "checkpoint.h"
#include "journal.h"
#include "record_codec.h"

namespace kvfs {
namespace {

void PutEntry(RecoveredState& st, DecodedRecord&& d) {
  st.next_id = std::max(st.next_id, d.record.id + 1);
  RecoveredState::Entry e;
  e.record = std::move(d.record);
  e.layout = std::move(d.layout);
  const ObjectId id = e.record.id;
  st.records[id] = std::move(e);
}

}  // namespace

Result<RecoveredState> Recover(const std::string& dir) {
  RecoveredState st;
  st.next_id = kRootId + 1;
  uint64_t first_journal = 1;
  auto ckpt = Checkpoint::Load(dir);
  if (ckpt.ok()) {
    st.fresh = false;
    first_journal = ckpt->first_journal;
    st.next_id = std::max(st.next_id, ckpt->next_id);
    for (auto& d : ckpt->records) PutEntry(st, std::move(d));
  } else if (ckpt.status().err() != ENOENT) {
    return Status::Corruption("cannot recover " + dir + ": " + ckpt.status().message());
  }

  KVFS_ASSIGN_OR_RETURN(std::vector<uint64_t> journals, Journal::List(dir));
  if (!journals.empty()) st.fresh = false;
  bool stopped = false;
  st.journal_number = first_journal;
  for (uint64_t number : journals) {
    const std::string path = dir + "/" + Journal::FileName(number);
    if (number < first_journal || stopped) {
      // Older than the checkpoint (a crash before their deletion), or after a corrupt point.
      if (stopped) spdlog::warn("engine: dropping {} after a corrupt journal record", path);
      ::unlink(path.c_str());
      continue;
    }
    KVFS_ASSIGN_OR_RETURN(JournalScan scan, Journal::Scan(path));
    uint64_t prev_end = Journal::kHeaderSize;
    for (JournalRecord& rec : scan.records) {
      if (rec.type == RecordType::kWatermark) {
        ByteReader r(rec.payload.data(), rec.payload.size());
        const uint64_t mark = r.U64();
        if (r.ok()) st.next_id = std::max(st.next_id, mark);
        prev_end = rec.end;
        continue;
      }
      DecodedBatch batch;
      Status s = RecordCodec::DecodeBatch(rec.payload, &batch);
      if (!s.ok()) {
        // Checksummed yet undecodable: written by a broken engine. Stop here like a torn tail.
        spdlog::error("engine: {} in {}", s.message(), path);
        scan.valid_bytes = prev_end;
        stopped = true;
        break;
      }
      for (ObjectId id : batch.removes) {
        st.records.erase(id);
        st.next_id = std::max(st.next_id, id + 1);
      }
      for (auto& d : batch.puts) PutEntry(st, std::move(d));
      ++st.replayed_records;
      prev_end = rec.end;
    }
    st.journal_number = number;
    st.journal_valid_bytes = scan.valid_bytes;
    if (!scan.clean() || stopped) {
      spdlog::warn("engine: {}: cutting {} bytes of torn or corrupt tail at offset {}", path,
                   scan.file_bytes - scan.valid_bytes, scan.valid_bytes);
      st.truncated = true;
      stopped = true;
      if (::truncate(path.c_str(), static_cast<off_t>(scan.valid_bytes)) != 0) {
        return Status::IoError("cannot truncate " + path);
      }
    }
  }
  if (journals.empty() || st.journal_number < first_journal) {
    st.journal_number = first_journal;
    st.journal_valid_bytes = 0;
  }
  return st;
}

}  // namespace kvfs
