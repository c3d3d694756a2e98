// The compaction hold of a read of the whole namespace (NamespaceKeys::ScanHold).
//
// A node reads every record at one revision when it starts and when its watch fell behind
// compaction, then watches from that revision + 1. Both need the revision's history until the
// watch runs: a read of millions of names can take longer than the history the cluster keeps
// (--etcd-history), and then failed midway every time, so a late joiner never started. The
// node puts its hold key (under its lease, so the hold dies with it) before the read; the
// compacting node never compacts past a hold's revision. The hold is released once the watch
// delivers changes up to etcd's newest revision (it caught up: compaction can no longer cancel
// it), or two seconds after the watch opened (etcd brings a watch up to date every 100 ms).
// Releasing right after the read was not enough: the read's revision is as old as the read is
// long, so compaction could pass it before the watch opened, and the watch then read the
// namespace all over again (seen in a test run: a node re-read it right after it joined).
#include <spdlog/spdlog.h>

#include "namespace_log.h"
#include "record_scan.h"

namespace kvfs::cluster {
namespace {

constexpr auto kQuietWatchRelease = std::chrono::seconds(2);

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

Result<int64_t> NamespaceLog::HeldScan(const std::function<void(ObjectRecord&&)>& fn) {
  // The hold is put first, so the read's revision (taken after it) is at or past the hold's.
  // Without a lease (not registered at the moment) there is no hold: one that outlived its
  // node would stop compaction for good.
  std::lock_guard lock(hold_mu_);
  hold_ = Hold::kNone;  // the put below takes the key over
  hold_waits_for_watch_ = false;
  watch_opened_ms_ = 0;
  const int64_t lease = hooks_.lease ? hooks_.lease() : 0;
  bool held = false;
  if (lease != 0) {
    auto put = etcd_->Put(keys_->ScanHold(options_.self), "", lease);
    held = put.ok();
    if (!put.ok()) {
      spdlog::warn("cluster: cannot hold etcd's compaction for a read of the namespace: {}",
                   put.status().ToString());
    }
  }
  Result<int64_t> revision = ScanRecords(etcd_, *keys_, options_.page, fn);
  if (held && revision.ok()) {
    hold_ = Hold::kUntilWatching;
    hold_waits_for_watch_ = true;
  } else if (held) {
    ReleaseHoldLocked();  // no watch starts from a failed read
  }
  return revision;
}

void NamespaceLog::ReleaseHoldLocked() {
  etcd::TxnRequest release;
  release.success.push_back(
      {etcd::TxnOp::Kind::kDelete, keys_->ScanHold(options_.self), "", "", 0, 0});
  Status st = etcd_->Txn(release).status();
  if (st.ok()) {
    hold_ = Hold::kNone;
    hold_waits_for_watch_ = false;
    return;
  }
  // The lease lives as long as this node: ReleaseScanHold tries again.
  if (hold_ != Hold::kLeft)
    spdlog::warn("cluster: releasing the compaction hold failed (again each second): {}",
                 st.ToString());
  hold_ = Hold::kLeft;
  hold_waits_for_watch_ = false;
}

void NamespaceLog::WatchDelivered() {
  if (!hold_waits_for_watch_.load()) return;
  std::lock_guard lock(hold_mu_);
  if (hold_ == Hold::kUntilWatching) ReleaseHoldLocked();
}

void NamespaceLog::ReleaseScanHold() {
  std::unique_lock lock(hold_mu_, std::try_to_lock);  // a read under way holds it rightly
  if (!lock.owns_lock()) return;
  const int64_t opened = watch_opened_ms_.load();
  const bool quiet_watch = hold_ == Hold::kUntilWatching && opened != 0 &&
                           NowMs() - opened >= kQuietWatchRelease.count() * 1000;
  if (hold_ == Hold::kLeft || quiet_watch) ReleaseHoldLocked();
}

void NamespaceLog::NoteWatchOpened() {
  if (hold_waits_for_watch_.load()) watch_opened_ms_ = NowMs();
}

}  // namespace kvfs::cluster
