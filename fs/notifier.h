// Notifier: tells the kernel to drop cached pages and attributes of an inode, from its own
// thread. Calling fuse_lowlevel_notify_inval_inode inside a request handler for the same inode
// can deadlock (the kernel may hold the inode's lock while it waits for that handler).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

#include "namespace.h"

struct fuse_session;

namespace kvfs::fs {

class Notifier : public InvalidationSink {
 public:
  ~Notifier() override { Stop(); }
  void Start(fuse_session* se);
  // Drains nothing more: pending notifications are dropped (the mount is going away).
  void Stop();
  void InvalidateInode(uint64_t ino, bool data) override;
  void InvalidateEntry(uint64_t parent, const std::string& name) override;
  void Drain(std::chrono::milliseconds max) override;

 private:
  void Run();

  fuse_session* se_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<uint64_t, bool>> queue_;
  std::deque<std::pair<uint64_t, std::string>> entries_;  // InvalidateEntry requests
  // Notifications queued and delivered so far (Drain waits for the second to reach the first).
  uint64_t queued_ = 0, delivered_ = 0;
  std::condition_variable delivered_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kvfs::fs
