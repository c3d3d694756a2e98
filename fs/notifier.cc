#include "notifier.h"

#include <fuse_lowlevel.h>
#include <spdlog/spdlog.h>

namespace kvfs::fs {

void Notifier::Start(fuse_session* se) {
  Target t;
  // Offset -1 drops only the attributes; 0 with length 0 drops every cached page as well.
  t.inode = [se](uint64_t ino, bool data) {
    return fuse_lowlevel_notify_inval_inode(se, ino, data ? 0 : -1, 0);
  };
  t.entry = [se](uint64_t parent, const std::string& name) {
    return fuse_lowlevel_notify_inval_entry(se, parent, name.c_str(), name.size());
  };
  Start(std::move(t));
}

void Notifier::Start(Target target) {
  target_ = std::move(target);
  {
    std::lock_guard lock(mu_);
    started_ = true;
    stop_ = false;
    running_ = true;
  }
  thread_ = std::thread([this] { Run(); });
}

void Notifier::Stop(std::chrono::milliseconds grace, const std::function<void()>& unstick) {
  {
    std::unique_lock lock(mu_);
    stop_ = true;
    cv_.notify_all();
    delivered_cv_.notify_all();
    if (unstick && !exited_cv_.wait_for(lock, grace, [&] { return !running_; })) {
      lock.unlock();
      spdlog::error("notifier: the kernel has held an invalidation for {} ms at shutdown",
                    grace.count());
      unstick();
    }
  }
  if (thread_.joinable()) thread_.join();
}

void Notifier::InvalidateInode(uint64_t ino, bool data) {
  {
    std::lock_guard lock(mu_);
    if (!started_ || stop_) return;
    fresh_.push_back(Note{false, ino, data, {}, 0, {}});
    ++queued_;
  }
  cv_.notify_one();
}

void Notifier::InvalidateEntry(uint64_t parent, const std::string& name) {
  {
    std::lock_guard lock(mu_);
    if (!started_ || stop_) return;
    fresh_.push_back(Note{true, parent, false, name, 0, {}});
    ++queued_;
  }
  cv_.notify_one();
}

void Notifier::Deliver(const Note& n) {
  // ENOENT: the kernel has nothing cached for it (the usual case for a repeat).
  if (n.entry) {
    int rc = target_.entry(n.id, n.name);
    if (rc != 0 && rc != -ENOENT) spdlog::debug("inval_entry {}/{} failed: {}", n.id, n.name, rc);
  } else {
    int rc = target_.inode(n.id, n.data);
    if (rc != 0 && rc != -ENOENT) spdlog::debug("inval_inode {} failed: {}", n.id, rc);
  }
}

void Notifier::Run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    // The next note: a fresh one first, else the repeat that is due earliest.
    std::deque<Note>* from = fresh_.empty() ? nullptr : &fresh_;
    Clock::time_point next_due = Clock::time_point::max();
    if (!from) {
      for (auto& q : repeats_) {
        if (!q.empty() && q.front().due < next_due) {
          next_due = q.front().due;
          from = &q;
        }
      }
      if (!from || next_due > Clock::now()) {
        if (from) {
          cv_.wait_until(lock, next_due);
        } else {
          cv_.wait(lock);
        }
        continue;
      }
    }
    Note n = std::move(from->front());
    from->pop_front();
    lock.unlock();
    Deliver(n);
    lock.lock();
    if (n.sent++ == 0) {
      ++delivered_;
      delivered_cv_.notify_all();
    }
    if (n.sent <= std::size(kRepeats) && repeats_[n.sent - 1].size() < kMaxWaitingRepeats) {
      n.due = Clock::now() + kRepeats[n.sent - 1];
      repeats_[n.sent - 1].push_back(std::move(n));
    }
  }
  running_ = false;
  exited_cv_.notify_all();
}

void Notifier::Drain(std::chrono::milliseconds max) {
  std::unique_lock lock(mu_);
  const uint64_t target = queued_;
  // Bounded: should the kernel hold a notification up (it may wait on a request of ours), the
  // caller goes on after `max` rather than hang.
  delivered_cv_.wait_for(lock, max, [&] { return stop_ || delivered_ >= target; });
}

}  // namespace kvfs::fs
