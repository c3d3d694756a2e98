// NamespaceLog, apply side: the paged load, the watch that applies other nodes' changes in
// revision order, and the paged re-read when compaction outran the watch.
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

#include "namespace_log.h"
#include "record_scan.h"
#include "record_value.h"

namespace kvfs::cluster {

Result<NamespaceLog::Epoch> NamespaceLog::ReadOrPutEpoch() {
  const std::string key = keys_->Epoch();
  uint8_t random[16];
  std::string fresh;
  if (RAND_bytes(random, sizeof random) == 1) {
    for (uint8_t b : random) fresh += Hex16(b).substr(14);
  } else {
    fresh = Hex16(static_cast<uint64_t>(std::random_device{}()) << 32 | std::random_device{}());
  }
  etcd::TxnRequest txn;
  txn.compare.push_back(
      {key, "", etcd::Compare::Target::kVersion, etcd::Compare::Op::kEqual, 0, ""});
  txn.success.push_back({etcd::TxnOp::Kind::kPut, key, fresh, "", 0, 0});
  txn.failure.push_back({etcd::TxnOp::Kind::kRange, key, "", "", 0, 0});
  KVFS_ASSIGN_OR_RETURN(etcd::TxnResponse r, etcd_->Txn(txn));
  if (r.succeeded) return Epoch{fresh, r.revision};
  if (r.ranges.empty() || r.ranges[0].kvs.empty()) return Status::IoError("etcd epoch vanished");
  return Epoch{r.ranges[0].kvs[0].value, r.revision};
}

Result<bool> NamespaceLog::CheckHistory() {
  KVFS_ASSIGN_OR_RETURN(Epoch now, ReadOrPutEpoch());
  const int64_t applied = applied_.load();
  if (now.value == epoch_ && now.revision >= applied) return false;
  spdlog::error(
      "cluster: etcd lost the namespace history this node applied (epoch {}, was {}; revision "
      "{}, this node applied {}): its data was wiped or restored from an older backup; "
      "re-reading the namespace from it, names it does not hold go",
      now.value, epoch_, now.revision, applied);
  epoch_ = now.value;
  return true;
}

Status NamespaceLog::Load(const std::function<void(ObjectRecord&&)>& fn) {
  const auto t0 = std::chrono::steady_clock::now();
  // Before the scan: records read after it belong to this epoch's history.
  KVFS_ASSIGN_OR_RETURN(Epoch epoch, ReadOrPutEpoch());
  epoch_ = epoch.value;
  size_t n = 0;
  auto counting = [&](ObjectRecord&& rec) {
    ++n;
    fn(std::move(rec));
  };
  KVFS_ASSIGN_OR_RETURN(int64_t revision, HeldScan(counting));
  applied_ = revision;
  spdlog::info(
      "cluster: loaded {} namespace records at revision {} in {} ms", n, revision,
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count());
  return Status::Ok();
}

void NamespaceLog::RestartWatch() {
  restart_watch_ = true;
  interrupt_watch_ = true;  // an idle stream is dropped at once, not at its next event
}

bool NamespaceLog::WaitApplied(int64_t revision, std::chrono::milliseconds timeout) {
  std::unique_lock lock(applied_mu_);
  return applied_cv_.wait_for(lock, timeout,
                              [&] { return stop_.load() || applied_.load() >= revision; });
}

bool NamespaceLog::HistoryDoubtful(const etcd::WatchResponse& resp) {
  if (resp.cluster_id != 0) {
    if (etcd_cluster_id_ == 0) etcd_cluster_id_ = resp.cluster_id;
    if (resp.cluster_id != etcd_cluster_id_) return true;
  }
  return resp.revision > 0 && resp.revision < applied_.load();
}

Status NamespaceLog::Resync(bool history_lost) {
  // The commit side keeps going: what this node commits after the re-read's revision is added
  // to the present set, and what it has in flight carries revision 0 in the fs (kept).
  if (history_lost) {
    // Revisions of the old history mean nothing in the new one, here or in the fs.
    {
      std::lock_guard lock(mu_);
      own_revisions_.clear();
      rebase_.clear();
      rebase_age_.clear();
      reset_at_.clear();
    }
    if (hooks_.history_lost) hooks_.history_lost();
  }
  std::vector<ObjectId> present;
  std::vector<ObjectRecord> page;
  auto flush = [&] {
    if (page.empty()) return;
    if (hooks_.apply) hooks_.apply(std::move(page), {});
    page.clear();
  };
  auto collect = [&](ObjectRecord&& rec) {
    present.push_back(rec.id);
    page.push_back(std::move(rec));
    if (page.size() >= options_.page) flush();
  };
  KVFS_ASSIGN_OR_RETURN(int64_t revision, HeldScan(collect));
  flush();
  {
    std::lock_guard lock(mu_);
    for (const auto& [id, steps] : rebase_) {
      for (const auto& [from, to] : steps) {
        if (static_cast<int64_t>(to) > revision) present.push_back(id);
      }
    }
  }
  std::sort(present.begin(), present.end());
  present.erase(std::unique(present.begin(), present.end()), present.end());
  if (hooks_.resync) hooks_.resync(present, revision);
  applied_ = revision;
  applied_cv_.notify_all();
  spdlog::warn("cluster: namespace re-read at revision {} ({} records)", revision, present.size());
  return Status::Ok();
}

void NamespaceLog::DeliverGroup(int64_t revision, std::vector<etcd::Event>& events) {
  bool own = false;
  {
    // A transaction of this node that was in flight when these events came may be them: wait
    // for its answer, which says its revision.
    std::unique_lock lock(mu_);
    const uint64_t started = txn_started_;
    in_flight_cv_.wait(lock, [&] { return stop_.load() || txn_done_ >= started; });
    own = own_revisions_.count(revision) > 0;
    own_revisions_.erase(own_revisions_.begin(), own_revisions_.upper_bound(revision));
  }
  if (!own) {
    std::vector<ObjectRecord> puts;
    std::vector<ObjectId> removes;
    for (etcd::Event& ev : events) {
      auto id = keys_->ParseRecord(ev.kv.key);
      if (!id) continue;
      {
        std::lock_guard lock(mu_);
        auto reset = reset_at_.find(*id);
        if (reset != reset_at_.end() && reset->second >= revision) continue;  // already newer
      }
      if (ev.type == etcd::Event::Type::kDelete) {
        removes.push_back(*id);
        continue;
      }
      auto v = DecodeRecordValue(ev.kv.value, static_cast<uint64_t>(ev.kv.mod_revision));
      if (!v.ok()) {
        spdlog::error("cluster: skipping key {} at revision {}: {}", ev.kv.key, revision,
                      v.status().ToString());
        continue;
      }
      puts.push_back(std::move(v->record));
    }
    if ((!puts.empty() || !removes.empty()) && hooks_.apply)
      hooks_.apply(std::move(puts), std::move(removes));
  }
  {
    std::lock_guard lock(mu_);
    std::erase_if(reset_at_, [&](const auto& kv) { return kv.second < revision; });
  }
  applied_ = revision;
  applied_cv_.notify_all();
}

void NamespaceLog::WatchLoop() {
  bool need_resync = false, history_lost = false, resumed = false, doubtful = false;
  int failures = 0;
  while (!stop_.load()) {
    // Batches refused or of unknown outcome: take what etcd holds for their objects and names
    // (while etcd is unreachable they wait; membership restarts the watch when it is back).
    if (!hooks_.writable || hooks_.writable()) {
      ResetWork uncertain;
      {
        std::lock_guard lock(mu_);
        std::swap(uncertain, uncertain_);
        resetting_ = uncertain;
      }
      if (!uncertain.empty()) ResetTo(uncertain, 0);
      bool again;
      {
        std::lock_guard lock(mu_);
        resetting_ = ResetWork();
        resetting_cv_.notify_all();
        again = !uncertain_.empty();
      }
      if (again) {  // etcd failed a read of it: again shortly, before watching
        std::unique_lock lock(applied_mu_);
        applied_cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stop_.load(); });
        continue;
      }
    }
    if (need_resync) {
      Status st = Resync(history_lost);
      if (!st.ok()) {
        spdlog::warn("cluster: namespace re-read failed: {}", st.ToString());
        std::unique_lock lock(applied_mu_);
        applied_cv_.wait_for(lock, std::chrono::milliseconds(500), [&] { return stop_.load(); });
        continue;
      }
      need_resync = false;
      history_lost = false;
    }
    // A watch resumed after an interruption (or one whose answer cast doubt): if etcd lost its
    // data meanwhile, the revisions ahead of this node's are another history's.
    if (resumed || doubtful) {
      Result<bool> lost = CheckHistory();
      if (!lost.ok()) {
        std::unique_lock lock(applied_mu_);
        applied_cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stop_.load(); });
        continue;
      }
      etcd_cluster_id_ = 0;  // whatever the verdict, the id is taken again from the next answer
      if (*lost) {
        doubtful = false;
        need_resync = true;
        history_lost = true;
        continue;
      }
      if (doubtful) {
        // A member behind the leader answered the watch: give it a moment to catch up.
        doubtful = false;
        std::unique_lock lock(applied_mu_);
        applied_cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop_.load(); });
      }
    }
    resumed = true;
    restart_watch_ = false;
    interrupt_watch_ = stop_.load();
    {
      // A refusal noted since the top of the loop: its RestartWatch may have come before the
      // flags were cleared just now.
      std::lock_guard lock(mu_);
      if (!uncertain_.empty() && (!hooks_.writable || hooks_.writable())) continue;
    }
    etcd::WatchRequest w;
    w.key = keys_->RecordPrefix();
    w.range_end = etcd::PrefixEnd(keys_->RecordPrefix());
    w.start_revision = applied_.load() + 1;
    std::atomic<bool> stop_this{false};
    NoteWatchOpened();
    Status st = etcd_->Watch(
        w,
        [&](const etcd::WatchResponse& resp) {
          failures = 0;
          if (HistoryDoubtful(resp)) {
            doubtful = true;
            return false;
          }
          // Changes up to etcd's newest revision: the watch is up to date.
          if (!resp.events.empty() && resp.events.back().kv.mod_revision >= resp.revision)
            WatchDelivered();
          // One response holds whole revisions, in order.
          std::vector<etcd::Event> group;
          int64_t rev = 0;
          for (const etcd::Event& ev : resp.events) {
            if (ev.kv.mod_revision != rev && !group.empty()) {
              DeliverGroup(rev, group);
              group.clear();
            }
            rev = ev.kv.mod_revision;
            group.push_back(ev);
          }
          if (!group.empty()) DeliverGroup(rev, group);
          return !stop_.load() && !restart_watch_.load();
        },
        interrupt_watch_);
    if (stop_.load()) return;
    if (doubtful) continue;  // CheckHistory decides, at the top
    if (etcd::IsCompacted(st)) {
      spdlog::warn("cluster: the namespace watch fell behind compaction: re-reading");
      need_resync = true;
      continue;
    }
    if (restart_watch_.load()) continue;
    if (failures++ % 50 == 0)
      spdlog::warn("cluster: namespace watch interrupted ({}); resuming from revision {}",
                   st.ToString(), applied_.load() + 1);
    std::unique_lock lock(applied_mu_);
    applied_cv_.wait_for(lock, std::chrono::milliseconds(200), [&] { return stop_.load(); });
  }
}

}  // namespace kvfs::cluster
