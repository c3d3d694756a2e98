// Notifier: tells the kernel to drop cached pages, attributes and dentries, from its own
// thread. Calling fuse_lowlevel_notify_inval_inode inside a request handler for the same inode
// can deadlock (the kernel may hold the inode's lock while it waits for that handler).
//
// Every notification is sent again kRepeats later. A change made by another node races with
// the kernel's own requests: a LOOKUP answered just before the change is applied instantiates
// its inode (or dentry) in the requesting task after the daemon replied, and a notification
// that arrives before that finds nothing to drop, so the old attributes would stay cached for
// their whole timeout. The repeats land after the requester ran.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "namespace.h"

struct fuse_session;

namespace kvfs::fs {

class Notifier : public InvalidationSink {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kRepeats[] = {std::chrono::milliseconds(50),
                                                           std::chrono::milliseconds(1000)};
  // Repeats waiting per step, at most: a burst of remote changes (a late joiner catching up on
  // a million names) must not queue a million notes twice over; past this they are skipped.
  static constexpr size_t kMaxWaitingRepeats = 4096;
  // Where notifications go: the kernel (Start with a session) or a test's recorder.
  struct Target {
    std::function<int(uint64_t ino, bool data)> inode;
    std::function<int(uint64_t parent, const std::string& name)> entry;
  };

  ~Notifier() override { Stop(); }
  void Start(fuse_session* se);
  void Start(Target target);
  // Drains nothing more: pending notifications are dropped (the mount is going away). Should a
  // delivery be held in the kernel past `grace` (it may wait for a lock held by a request that
  // nobody will read any more: the loop has ended), `unstick` is called first (the daemon
  // aborts its connection, which fails that request and lets the delivery return).
  void Stop(std::chrono::milliseconds grace = {}, const std::function<void()>& unstick = {});
  void InvalidateInode(uint64_t ino, bool data) override;
  void InvalidateEntry(uint64_t parent, const std::string& name) override;
  // Waits for the first delivery of everything queued before the call (not the repeats).
  void Drain(std::chrono::milliseconds max) override;

 private:
  struct Note {
    bool entry = false;
    uint64_t id = 0;  // the inode, or the entry's parent
    bool data = false;
    std::string name;
    size_t sent = 0;  // deliveries so far
    Clock::time_point due{};
  };
  void Run();
  void Deliver(const Note& n);

  Target target_;
  bool started_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Note> fresh_;
  // Repeats, one queue per step so each stays in time order.
  std::deque<Note> repeats_[std::size(kRepeats)];
  // Notifications queued and delivered once so far (Drain waits for the second to reach the first).
  uint64_t queued_ = 0, delivered_ = 0;
  std::condition_variable delivered_cv_;
  bool stop_ = false;
  bool running_ = false;  // Run has not returned
  std::condition_variable exited_cv_;
  std::thread thread_;
};

}  // namespace kvfs::fs
