// NamespaceLog, reset side: the fs applies a change before etcd takes it, so a batch refused, or
// whose outcome is unknown, has its objects and the holders of its names set back to what etcd
// holds (StoreListener::OnRolledBack): at once after a conflict, or, for a batch refused while
// etcd was unreachable, once it answers (the watch thread, or the next change touching them).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

#include "namespace_log.h"
#include "record_value.h"

namespace kvfs::cluster {

void NamespaceLog::ResetWork::Add(const MetaBatch& batch) {
  for (const auto& put : batch.puts) AddObject(put.id, batch.seq);
  for (ObjectId id : batch.removes) AddObject(id, batch.seq);
  for (const NameChange& c : batch.names) AddName(c.parent, c.name, batch.seq);
}

bool NamespaceLog::ResetWork::Touches(const MetaBatch& batch) const {
  if (empty()) return false;
  for (const auto& put : batch.puts)
    if (objects.count(put.id)) return true;
  for (ObjectId id : batch.removes)
    if (objects.count(id)) return true;
  for (const NameChange& c : batch.names)
    if (names.count({c.parent, c.name})) return true;
  return false;
}

Status NamespaceLog::ResetIfUncertain(const MetaBatch& batch) {
  ResetWork work;
  {
    std::unique_lock lock(mu_);
    if (!uncertain_.Touches(batch) && !resetting_.Touches(batch)) return Status::Ok();
    // The watch thread's reset in progress first: the fs skips what it resets of the batch's
    // objects (the batch is a later change of them), so this one resets them again after it.
    // Without the wait, every attempt of the change would be refused while it runs.
    resetting_cv_.wait_for(lock, std::chrono::seconds(2),
                           [&] { return stop_.load() || resetting_.empty(); });
    // Everything still uncertain goes now (what the batch touches may hang together with the
    // rest: a name moved between two objects).
    std::swap(work, uncertain_);
  }
  work.Add(batch);
  if (!ResetTo(work, 0)) return ResetUnanswered();
  return Status::Conflict(
      "an earlier change of these files was refused: reset to etcd's state first");
}

Status NamespaceLog::ResetUnanswered() {
  return Status::Error(EROFS,
                       "etcd did not answer the reset of a refused change: namespace changes are "
                       "refused until it does");
}

void NamespaceLog::NoteRefused(const MetaBatch& batch) {
  {
    std::lock_guard lock(mu_);
    ++counters_.refused_unreachable;
  }
  NoteFailed(batch);
}

void NamespaceLog::NoteFailed(const MetaBatch& batch) {
  {
    std::lock_guard lock(mu_);
    uncertain_.Add(batch);
  }
  // The watch thread resets them before it resumes watching: now, if etcd answers; else once
  // it does (membership then restarts the watch).
  RestartWatch();
}

namespace {

// Range operations per transaction: under etcd's --max-txn-ops (128 by default).
constexpr size_t kReadsPerTxn = 64;

// Reads `keys` in as few transactions as etcd allows, each a snapshot at one revision: after an
// outage a reset re-reads hundreds of keys, one round trip each was 1-2 ms apiece here. One
// answer per key, in order (an empty kvs: no such key); a key of a failed transaction has none.
std::vector<std::optional<etcd::RangeResponse>> ReadKeys(etcd::Client* etcd,
                                                         const std::vector<std::string>& keys) {
  std::vector<std::optional<etcd::RangeResponse>> out(keys.size());
  for (size_t first = 0; first < keys.size(); first += kReadsPerTxn) {
    const size_t last = std::min(keys.size(), first + kReadsPerTxn);
    etcd::TxnRequest txn;
    for (size_t i = first; i < last; ++i)
      txn.success.push_back({etcd::TxnOp::Kind::kRange, keys[i], "", "", 0, 0});
    auto r = etcd->Txn(txn);
    if (!r.ok() || !r->succeeded || r->ranges.size() != last - first) continue;
    for (size_t i = first; i < last; ++i) {
      out[i] = std::move(r->ranges[i - first]);
      out[i]->revision = r->revision;
    }
  }
  return out;
}

}  // namespace

bool NamespaceLog::ResetTo(const ResetWork& work, int64_t seen_revision) {
  if (seen_revision > 0) WaitApplied(seen_revision, std::chrono::seconds(2));
  std::vector<std::pair<ObjectId, uint64_t>> ids(work.objects.begin(), work.objects.end());
  // The holders of the names come after: a name the batch's objects give back in the reset is
  // then taken by its real holder.
  std::vector<std::string> keys;
  for (const auto& [key, seq] : work.names) keys.push_back(keys_->Name(key.first, key.second));
  std::vector<std::optional<etcd::RangeResponse>> held = ReadKeys(etcd_, keys);
  std::map<ObjectId, uint64_t> holders;
  bool complete = true;
  size_t i = 0;
  for (const auto& [key, seq] : work.names) {
    const std::optional<etcd::RangeResponse>& got = held[i++];
    if (!got) {
      std::lock_guard lock(mu_);
      uncertain_.AddName(key.first, key.second, seq);
      complete = false;
    } else if (!got->kvs.empty()) {
      auto id = ParseHex16(got->kvs[0].value);
      if (id && !work.objects.count(*id)) holders[*id] = std::max(holders[*id], seq);
    }
  }
  ids.insert(ids.end(), holders.begin(), holders.end());
  keys.clear();
  for (const auto& [id, seq] : ids) keys.push_back(keys_->Record(id));
  std::vector<std::optional<etcd::RangeResponse>> records = ReadKeys(etcd_, keys);
  for (size_t k = 0; k < ids.size(); ++k) {
    const auto& [id, seq] = ids[k];
    const std::optional<etcd::RangeResponse>& got = records[k];
    if (!got) {
      std::lock_guard lock(mu_);
      uncertain_.AddObject(id, seq);
      complete = false;
      continue;
    }
    std::unique_ptr<ObjectRecord> rec;
    if (!got->kvs.empty()) {
      auto v =
          DecodeRecordValue(got->kvs[0].value, static_cast<uint64_t>(got->kvs[0].mod_revision));
      if (v.ok()) rec = std::make_unique<ObjectRecord>(std::move(v->record));
    }
    {
      std::lock_guard lock(mu_);
      reset_at_[id] = got->revision;
    }
    if (hooks_.reset) hooks_.reset(id, rec.get(), {static_cast<uint64_t>(got->revision), seq});
  }
  if (!complete) RestartWatch();
  return complete;
}

}  // namespace kvfs::cluster
