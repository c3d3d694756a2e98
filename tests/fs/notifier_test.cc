// Notifier: every notification reaches its target at once and twice more later (the repeats
// that catch a LOOKUP reply the kernel instantiated after the first one; notifier.h).
#include "notifier.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <map>
#include <thread>

namespace kvfs::fs {
namespace {

class Recorder {
 public:
  Notifier::Target Target() {
    Notifier::Target t;
    t.inode = [this](uint64_t ino, bool data) {
      std::lock_guard lock(mu_);
      ++inodes_[{ino, data}];
      order_.push_back("i" + std::to_string(ino));
      return -ENOENT;  // nothing cached: the common answer, which must not stop the repeats
    };
    t.entry = [this](uint64_t parent, const std::string& name) {
      std::lock_guard lock(mu_);
      ++entries_[{parent, name}];
      order_.push_back("e" + std::to_string(parent) + "/" + name);
      return 0;
    };
    return t;
  }
  int inode(uint64_t ino, bool data) {
    std::lock_guard lock(mu_);
    return inodes_[{ino, data}];
  }
  int entry(uint64_t parent, const std::string& name) {
    std::lock_guard lock(mu_);
    return entries_[{parent, name}];
  }
  std::vector<std::string> order() {
    std::lock_guard lock(mu_);
    return order_;
  }

 private:
  std::mutex mu_;
  std::map<std::pair<uint64_t, bool>, int> inodes_;
  std::map<std::pair<uint64_t, std::string>, int> entries_;
  std::vector<std::string> order_;
};

// Polls for up to 20 s (an event, not a speed: the repeats come 50 ms and 1 s later).
template <class Pred>
bool Eventually(Pred pred) {
  for (int i = 0; i < 2000; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

TEST(NotifierTest, EveryNotificationIsDeliveredOnceAtOnceThenRepeatedTwice) {
  Recorder rec;
  Notifier n;
  n.Start(rec.Target());
  n.InvalidateInode(7, true);
  n.InvalidateEntry(1, "a");
  n.InvalidateInode(8, false);
  n.Drain(std::chrono::seconds(10));
  // Drain means the first delivery of each; the repeats are not due yet.
  EXPECT_GE(rec.inode(7, true), 1);
  EXPECT_GE(rec.entry(1, "a"), 1);
  EXPECT_GE(rec.inode(8, false), 1);
  const auto first = rec.order();
  ASSERT_GE(first.size(), 3u);
  EXPECT_EQ(std::vector<std::string>(first.begin(), first.begin() + 3),
            (std::vector<std::string>{"i7", "e1/a", "i8"}));
  EXPECT_TRUE(Eventually([&] {
    return rec.inode(7, true) == 3 && rec.entry(1, "a") == 3 && rec.inode(8, false) == 3;
  }));
  n.Stop();
  EXPECT_EQ(rec.inode(7, true), 3);
  EXPECT_EQ(rec.order().size(), 9u);
}

TEST(NotifierTest, StopDropsPendingRepeatsAndLaterNotifications) {
  Recorder rec;
  Notifier n;
  n.Start(rec.Target());
  n.InvalidateInode(3, true);
  n.Drain(std::chrono::seconds(10));
  n.Stop();  // returns without waiting for the repeats
  n.InvalidateInode(4, true);
  EXPECT_EQ(rec.inode(4, true), 0);
  EXPECT_LE(rec.inode(3, true), 3);
}

// A burst (a late joiner applying a million remote names) is delivered in full once, but only
// kMaxWaitingRepeats of it wait for each repeat: the queues must not grow with the burst.
TEST(NotifierTest, ABurstQueuesABoundedNumberOfRepeats) {
  Recorder rec;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  Notifier::Target t = rec.Target();
  auto record = t.inode;
  // The first delivery holds the notifier until the whole burst is queued, so every fresh note
  // is delivered before any repeat falls due and the count below is exact.
  t.inode = [record, released](uint64_t ino, bool data) {
    if (ino == 0) released.wait();
    return record(ino, data);
  };
  Notifier n;
  n.Start(t);
  n.InvalidateInode(0, true);
  constexpr uint64_t kBurst = 3 * Notifier::kMaxWaitingRepeats;
  for (uint64_t i = 1; i <= kBurst; ++i) n.InvalidateInode(i, true);
  release.set_value();
  n.Drain(std::chrono::seconds(20));
  const size_t expected = kBurst + 1 + 2 * Notifier::kMaxWaitingRepeats;
  EXPECT_TRUE(Eventually([&] { return rec.order().size() >= expected; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // any stray repeat would be due
  n.Stop();
  EXPECT_EQ(rec.order().size(), expected);
  EXPECT_EQ(rec.inode(kBurst, true), 1);  // past the bound: delivered once, not repeated
  EXPECT_EQ(rec.inode(0, true), 3);
}

// At shutdown a delivery the kernel holds (it waits for a lock of a request nobody will read
// any more) would hold Stop for ever: after the grace Stop calls `unstick` (the daemon aborts
// the connection, and the held write returns), then joins.
TEST(NotifierTest, AStopHeldUpByADeliveryUnsticksItAfterTheGrace) {
  Recorder rec;
  std::promise<void> abort;
  std::shared_future<void> aborted = abort.get_future().share();
  std::atomic<bool> delivering{false};
  Notifier::Target t = rec.Target();
  t.entry = [&delivering, aborted](uint64_t, const std::string&) {
    delivering = true;
    aborted.wait();  // the kernel's write returns once the connection is aborted
    return -ENOTCONN;
  };
  Notifier n;
  n.Start(t);
  n.InvalidateEntry(1, "held");
  ASSERT_TRUE(Eventually([&] { return delivering.load(); }));
  int unsticks = 0;
  n.Stop(std::chrono::milliseconds(100), [&] {
    ++unsticks;
    abort.set_value();
  });
  EXPECT_EQ(unsticks, 1);
}

TEST(NotifierTest, AStopWithNothingHeldNeverUnsticks) {
  Recorder rec;
  Notifier n;
  n.Start(rec.Target());
  n.InvalidateInode(5, true);
  n.Drain(std::chrono::seconds(10));
  int unsticks = 0;
  n.Stop(std::chrono::seconds(10), [&] { ++unsticks; });
  EXPECT_EQ(unsticks, 0);
  EXPECT_GE(rec.inode(5, true), 1);
}

}  // namespace
}  // namespace kvfs::fs
