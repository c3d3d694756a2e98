// The order of this node's changes against a shared namespace (a cluster on etcd). The fs
// applies a change to its tree before the store commits it; meanwhile other nodes' commits
// arrive through the watch, and a refused change is reset from a read of etcd taken on another
// thread. Both must give way to what is newer than they are:
//   - a commit of this node reaches the tree from the committing thread (NoteCommitted), before
//     the watch delivers the commits before it;
//   - another node's record that would take a name held by an object whose change is still on
//     its way waits for that change's answer (deferred claims), then applies in revision order;
//   - a reset gives way to a later change of the same object or of a name's holder
//     (MetaBatch::seq) that may still commit, and to a holder committed after the read
//     (Overtakes, used by RestoreStoreRecord); one that gave way to a holder's change still on
//     its way runs again if that change is refused (EndInFlight).
#include <algorithm>
#include <chrono>
#include <random>
#include <thread>

#include "namespace.h"

namespace kvfs::fs {

uint64_t Namespace::TakeTicket(MetaBatch& batch) {
  const uint64_t ticket = next_ticket_++;
  batch.seq = ticket + 1;
  if (!shared_) return ticket;
  InFlightBatch& flight = in_flight_[batch.seq];
  for (const ObjectRecord& put : batch.puts) {
    last_change_[put.id] = {batch.seq, false};
    flight.puts.push_back(put.id);
    ++in_flight_ids_[put.id];
  }
  for (ObjectId id : batch.removes) {
    last_change_[id] = {batch.seq, false};
    flight.removes.push_back(id);
    ++in_flight_ids_[id];
  }
  // Only changes still waiting on the store, or refused a moment ago, matter; a reset comes
  // right after the refusal or once etcd answers again (changes are refused until then). The
  // newest 64Ki changes are kept, whatever their age.
  constexpr uint64_t kKeep = 1u << 16;
  if (last_change_.size() > 2 * kKeep)
    std::erase_if(last_change_, [&](const auto& kv) { return kv.second.seq + kKeep <= batch.seq; });
  return ticket;
}

void Namespace::NoteCommitted(uint64_t seq, uint64_t revision) {
  std::lock_guard lock(mu_);
  auto it = in_flight_.find(seq);
  if (it == in_flight_.end()) return;
  for (ObjectId id : it->second.puts) {
    Inode* in = Find(id);
    if (in && in->rec.revision < revision) in->rec.revision = revision;
  }
}

bool Namespace::Overtakes(const Inode* x, ResetOrigin origin) const {
  if (!x) return false;
  // A change of x made after the refused one: when it commits, x is what this node shows; when
  // it is refused too, its own reset comes. One refused already overtakes nothing (unless an
  // earlier change of x is still on its way): both resets are of etcd's state, often in one
  // pass; giving way to it left a name off the file etcd gives it, for good (the stress run,
  // seed 308: the holder's reset to "gone" came second and freed the name for no one).
  if (origin.seq != 0) {
    auto it = last_change_.find(x->rec.id);
    if (it != last_change_.end() && it->second.seq > origin.seq &&
        (!it->second.refused || InFlightLocked(x->rec.id)))
      return true;
  }
  // x reached this node in a commit after the store read the state it resets to.
  return origin.as_of != 0 && x->rec.revision > origin.as_of;
}

bool Namespace::InFlightLocked(ObjectId id) const { return in_flight_ids_.count(id) > 0; }

bool Namespace::LastChangeRefusedLocked(ObjectId id) const {
  auto it = last_change_.find(id);
  return it != last_change_.end() && it->second.refused;
}

void Namespace::EndInFlight(uint64_t seq, bool refused) {
  Stale stale;
  std::vector<ResetBehind> again;
  {
    std::lock_guard lock(mu_);
    auto it = in_flight_.find(seq);
    if (it == in_flight_.end()) return;
    auto done = [&](ObjectId id) {
      auto n = in_flight_ids_.find(id);
      if (n != in_flight_ids_.end() && --n->second == 0) in_flight_ids_.erase(n);
      auto last = last_change_.find(id);
      if (refused && last != last_change_.end() && last->second.seq == seq)
        last->second.refused = true;
      if (InFlightLocked(id)) return;
      if (auto behind = resets_behind_.find(id); behind != resets_behind_.end()) {
        if (refused) again.insert(again.end(), behind->second.begin(), behind->second.end());
        resets_behind_.erase(behind);
      }
    };
    for (ObjectId id : it->second.puts) done(id);
    for (ObjectId id : it->second.removes) done(id);
    in_flight_.erase(it);
    in_flight_cv_.notify_all();
    ApplyDeferredClaimsLocked(stale);
  }
  Announce(stale);
  // The holder's change was refused: it overtakes nothing now (Overtakes), so these resets
  // give the names back that its own reset does not.
  for (const ResetBehind& r : again)
    RestoreStoreRecord(r.id, r.record ? &*r.record : nullptr, r.origin);
  RunReadyResets();  // a record that waited for a name may have brought a directory back
}

void Namespace::ForgetRefusedInKernel(const MetaBatch& batch) {
  if (!sink_) return;
  // Delivered once the failed request is answered: the kernel holds the directories' locks
  // until then, and the notifier waits for them.
  for (const NameChange& n : batch.names) sink_->InvalidateEntry(n.parent, n.name);
  for (const ObjectRecord& put : batch.puts) sink_->InvalidateInode(put.id, false);
  for (ObjectId id : batch.removes) sink_->InvalidateInode(id, false);
}

void Namespace::ApplyDeferredClaimsLocked(Stale& stale) {
  // Records that waited for a name: its holder's change was answered (a commit makes its
  // revision final, a refusal resets it), or the file in writing that held it left it or was
  // reset. In revision order, as the watch gave them.
  if (deferred_claims_.empty()) return;
  std::vector<ObjectRecord> ready;
  for (auto d = deferred_claims_.begin(); d != deferred_claims_.end();) {
    if (NameBlockedLocked(d->second)) {
      ++d;
      continue;
    }
    ready.push_back(std::move(d->second));
    d = deferred_claims_.erase(d);
  }
  std::sort(ready.begin(), ready.end(),
            [](const ObjectRecord& a, const ObjectRecord& b) { return a.revision < b.revision; });
  for (const ObjectRecord& rec : ready) RemotePutLocked(rec, stale);
  KeepKnownToKernelLocked(stale);
}

void Namespace::AwaitEarlierChanges() {
  if (!shared_) return;
  std::unique_lock lock(mu_);
  const uint64_t upto = next_ticket_;  // seqs handed out so far are <= this
  in_flight_cv_.wait_for(lock, std::chrono::seconds(2), [&] {
    return std::none_of(in_flight_.begin(), in_flight_.end(),
                        [&](const auto& kv) { return kv.first <= upto; });
  });
}

void Namespace::BeforeRetry(int attempt) {
  AwaitEarlierChanges();
  if (attempt < 3) return;
  thread_local std::minstd_rand rng(std::random_device{}());
  const int cap_ms = 1 << std::min(attempt - 2, 6);
  std::this_thread::sleep_for(
      std::chrono::microseconds(std::uniform_int_distribution<int>(0, cap_ms * 1000)(rng)));
}

bool Namespace::NameBlockedLocked(const ObjectRecord& rec) {
  for (const kvfs::Link& l : rec.links()) {
    Inode* dir = Find(l.parent);
    Inode* holder = dir && dir->dir ? Child(dir, l.name) : nullptr;
    if (holder && holder->rec.id != rec.id &&
        (InFlightLocked(holder->rec.id) || !holder->journaled))
      return true;
  }
  return false;
}

}  // namespace kvfs::fs
