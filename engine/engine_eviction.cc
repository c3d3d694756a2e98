#include "engine_eviction.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <unordered_set>

namespace kvfs {
namespace {

uint64_t NowMs() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

}  // namespace

eviction::AccessContext EngineEviction::Context(uint64_t now_ms) {
  eviction::AccessContext ctx;
  ctx.stream = 0;  // see Touch() in the header
  ctx.time_ms = now_ms;
  return ctx;  // position unknown: bursts split on time gaps and on a read after a write
}

uint64_t AllocatedBytes(const Layout& layout) {
  uint64_t bytes = 0;
  for (const Segment& s : layout.segments) bytes += (uint64_t{s.stored_len} + 4095) / 4096 * 4096;
  return bytes;
}

Result<std::unique_ptr<EngineEviction>> EngineEviction::Make(const EngineOptions& options) {
  const double high = options.high_watermark, low = options.low_watermark;
  if (!(high > 0.0 && high <= 1.0) || !(low > 0.0 && low < high)) {
    return Status::Invalid("watermarks must satisfy 0 < low < high <= 1 (got low " +
                           std::to_string(low) + ", high " + std::to_string(high) + ")");
  }
  KVFS_ASSIGN_OR_RETURN(auto policy, eviction::MakePolicy(options.eviction));
  return std::unique_ptr<EngineEviction>(new EngineEviction(std::move(policy), high, low));
}

void EngineEviction::TrackRecord(const ObjectRecord& rec) {
  const bool pin = (rec.flags & kFlagPinned) != 0;
  if (rec.type != ObjectType::kFile || !rec.layout) {
    Untrack(rec.id);
    return;
  }
  auto it = entries_.find(rec.id);
  if (it == entries_.end() || it->second.layout.lock() != rec.layout) {
    // A new version (not a rename or a flag update, which carry the same layout).
    eviction::TrackHints hints;
    hints.parent = rec.prefix_parent();
    hints.context = Context(NowMs());
    Entry& e = entries_[rec.id];
    e.layout = rec.layout;
    e.bytes = AllocatedBytes(*rec.layout);
    e.parent = rec.prefix_parent();
    // Pin before Track so a pinned file never appears in the eviction order.
    e.pinned = pin;
    SyncPin(rec.id, e);
    policy_->Track(rec.id, e.bytes, hints);
    return;
  }
  it->second.pinned = pin;
  SyncPin(rec.id, it->second);
  // user.kvfs.parent set after the publish: same layout, new link.
  if (it->second.parent != rec.prefix_parent()) {
    policy_->SetParent(rec.id, rec.prefix_parent());
    it->second.parent = rec.prefix_parent();
  }
}

void EngineEviction::SyncPin(ObjectId id, Entry& e) {
  const bool want = e.pinned || writing_.count(id) != 0;
  if (want == e.policy_pinned) return;
  policy_->SetPinned(id, want);
  e.policy_pinned = want;
}

void EngineEviction::SetWriting(ObjectId id, bool writing) {
  if (writing) {
    writing_.insert(id);
  } else {
    writing_.erase(id);
  }
  if (auto it = entries_.find(id); it != entries_.end()) SyncPin(id, it->second);
}

void EngineEviction::Untrack(ObjectId id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  if (it->second.policy_pinned) policy_->SetPinned(id, false);
  policy_->Remove(id);
  entries_.erase(it);
}

bool EngineEviction::pinned(ObjectId id) const {
  auto it = entries_.find(id);
  return it != entries_.end() && it->second.pinned;
}

void EngineEviction::OnApply(const MetaBatch& batch) {
  for (ObjectId id : batch.removes) Untrack(id);
  for (const ObjectRecord& rec : batch.puts) TrackRecord(rec);
}

void EngineEviction::Touch(ObjectId id, uint64_t /*stream*/, uint64_t now_ms) {
  if (!entries_.count(id)) return;
  policy_->Touch(id, Context(now_ms));
}

uint64_t EngineEviction::PendingFree() {
  uint64_t bytes = 0;
  std::erase_if(pending_, [](const auto& p) { return p.first.expired(); });
  for (const auto& p : pending_) bytes += p.second;
  return bytes;
}

void EngineEviction::NoteVictims(const std::vector<ObjectId>& victims) {
  for (ObjectId id : victims) {
    auto it = entries_.find(id);
    if (it == entries_.end()) continue;
    pending_.emplace_back(it->second.layout, it->second.bytes);
    entries_.erase(it);
  }
}

std::vector<ObjectId> EngineEviction::OverWatermark(uint64_t used, uint64_t capacity,
                                                    const std::vector<ObjectId>& spared) {
  if (capacity == 0) return {};
  const uint64_t pending = PendingFree();
  const uint64_t effective = used > pending ? used - pending : 0;
  if (static_cast<double>(effective) <= high_ * static_cast<double>(capacity)) return {};
  const auto low = static_cast<uint64_t>(low_ * static_cast<double>(capacity));
  // Spared ids are pinned for the pick: the policy's own way to leave an id out.
  std::vector<ObjectId> unpin;
  for (ObjectId id : spared) {
    auto it = entries_.find(id);
    if (it == entries_.end() || it->second.policy_pinned) continue;
    policy_->SetPinned(id, true);
    unpin.push_back(id);
  }
  std::vector<ObjectId> victims = policy_->EvictBytes(effective - low);
  for (ObjectId id : unpin) policy_->SetPinned(id, false);
  NoteVictims(victims);
  return victims;
}

std::vector<ObjectId> EngineEviction::Victims(size_t n) {
  std::vector<ObjectId> victims = policy_->Evict(n);
  NoteVictims(victims);
  return victims;
}

uint64_t EngineEviction::ReclaimableBytes() {
  uint64_t bytes = PendingFree();
  for (const auto& [id, e] : entries_) {
    if (!e.policy_pinned) bytes += e.bytes;
  }
  return bytes;
}

std::vector<ObjectId> EngineEviction::ReclaimVictims(uint64_t used, uint64_t capacity,
                                                     uint64_t shortfall) {
  const uint64_t pending = PendingFree();
  const uint64_t effective = used > pending ? used - pending : 0;
  const auto low = static_cast<uint64_t>(low_ * static_cast<double>(capacity));
  const uint64_t to_low = effective > low ? effective - low : 0;
  const uint64_t want = std::max(to_low, shortfall > pending ? shortfall - pending : 0);
  // At least one victim: the writer found no free extent whatever the watermarks say.
  std::vector<ObjectId> victims = want > 0 ? policy_->EvictBytes(want) : policy_->Evict(1);
  if (victims.empty()) victims = policy_->Evict(1);
  NoteVictims(victims);
  return victims;
}

void EngineEviction::Forget(ObjectId id) {
  auto it = entries_.find(id);
  if (it == entries_.end()) return;
  pending_.emplace_back(it->second.layout, it->second.bytes);
  Untrack(id);
}

PolicyState EngineEviction::Snapshot() const {
  PolicyState state;
  state.policy = std::string(policy_->name());
  state.ids.reserve(entries_.size());
  for (const auto& [id, e] : entries_) state.ids.push_back(id);
  state.blob = policy_->Persist();
  return state;
}

void EngineEviction::Recover(FileSystem& fs, const std::string& data_dir,
                             const std::vector<ObjectRecord>& records) {
  std::vector<const ObjectRecord*> files;
  for (const ObjectRecord& rec : records) {
    if (rec.type == ObjectType::kFile && rec.layout) files.push_back(&rec);
  }
  std::unordered_set<ObjectId> known;  // ids the recovered policy state already holds
  Result<PolicyState> loaded = PolicyStateFile::Load(fs, data_dir);
  if (!loaded.ok()) {
    if (loaded.status().err() != ENOENT || !files.empty()) {
      spdlog::warn("engine: eviction state not used ({}); rebuilding {} order from the index",
                   loaded.status().message(), policy_->name());
    }
  } else if (loaded->policy != policy_->name()) {
    spdlog::info(
        "engine: eviction state was written by policy '{}'; rebuilding '{}' from the "
        "index",
        loaded->policy, policy_->name());
  } else if (Status st = policy_->Recover(loaded->blob); !st.ok()) {
    spdlog::warn("engine: eviction state rejected ({}); rebuilding from the index", st.message());
  } else {
    known.insert(loaded->ids.begin(), loaded->ids.end());
  }
  std::unordered_set<ObjectId> present;
  for (const ObjectRecord* rec : files) present.insert(rec->id);
  for (ObjectId id : known) {
    if (!present.count(id)) policy_->Remove(id);  // unlinked or evicted after the state was saved
  }
  // Files the state never saw enter oldest first, so recency among them follows mtime.
  std::vector<const ObjectRecord*> missing;
  for (const ObjectRecord* rec : files) {
    const bool pin = (rec->flags & kFlagPinned) != 0;
    if (known.count(rec->id)) {
      Entry& e = entries_[rec->id];
      e.layout = rec->layout;
      e.bytes = AllocatedBytes(*rec->layout);
      e.parent = rec->prefix_parent();
      // The blob may be older than the journaled link and flag; the record wins.
      if (rec->prefix_parent() != kInvalidId) policy_->SetParent(rec->id, rec->prefix_parent());
      e.pinned = pin;
      e.policy_pinned = pin || writing_.count(rec->id) != 0;
      policy_->SetPinned(rec->id, e.policy_pinned);
    } else {
      missing.push_back(rec);
    }
  }
  std::sort(missing.begin(), missing.end(), [](const ObjectRecord* a, const ObjectRecord* b) {
    if (a->mtime.sec != b->mtime.sec) return a->mtime.sec < b->mtime.sec;
    if (a->mtime.nsec != b->mtime.nsec) return a->mtime.nsec < b->mtime.nsec;
    return a->id < b->id;
  });
  for (const ObjectRecord* rec : missing) TrackRecord(*rec);
}

}  // namespace kvfs
