#include "notifier.h"

#include <fuse_lowlevel.h>
#include <spdlog/spdlog.h>

namespace kvfs::fs {

void Notifier::Start(fuse_session* se) {
  se_ = se;
  stop_ = false;
  thread_ = std::thread([this] { Run(); });
}

void Notifier::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  delivered_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Notifier::InvalidateInode(uint64_t ino, bool data) {
  {
    std::lock_guard lock(mu_);
    if (!se_ || stop_) return;
    queue_.emplace_back(ino, data);
    ++queued_;
  }
  cv_.notify_one();
}

void Notifier::InvalidateEntry(uint64_t parent, const std::string& name) {
  {
    std::lock_guard lock(mu_);
    if (!se_ || stop_) return;
    entries_.emplace_back(parent, name);
    ++queued_;
  }
  cv_.notify_one();
}

void Notifier::Run() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty() || !entries_.empty(); });
    if (stop_) return;
    if (!entries_.empty()) {
      auto [parent, name] = std::move(entries_.front());
      entries_.pop_front();
      lock.unlock();
      int rc = fuse_lowlevel_notify_inval_entry(se_, parent, name.c_str(), name.size());
      if (rc != 0 && rc != -ENOENT) spdlog::debug("inval_entry {}/{} failed: {}", parent, name, rc);
      lock.lock();
      ++delivered_;
      delivered_cv_.notify_all();
      continue;
    }
    auto [ino, data] = queue_.front();
    queue_.pop_front();
    lock.unlock();
    // Offset -1 drops only the attributes; 0 with length 0 drops every cached page as well.
    int rc = fuse_lowlevel_notify_inval_inode(se_, ino, data ? 0 : -1, 0);
    if (rc != 0 && rc != -ENOENT) spdlog::debug("inval_inode {} failed: {}", ino, rc);
    lock.lock();
    ++delivered_;
    delivered_cv_.notify_all();
  }
}

void Notifier::Drain(std::chrono::milliseconds max) {
  std::unique_lock lock(mu_);
  const uint64_t target = queued_;
  // Bounded: should the kernel hold a notification up (it may wait on a request of ours), the
  // caller goes on after `max` rather than hang.
  delivered_cv_.wait_for(lock, max, [&] { return stop_ || delivered_ >= target; });
}

}  // namespace kvfs::fs
