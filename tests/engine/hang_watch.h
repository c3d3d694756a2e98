// HangWatch: for tests whose failure mode could be a hang. If no Step() comes within the limit
// it prints the last step and every thread's stack to stderr, then aborts: a hang in CI then
// says where it is instead of ctest's bare "Timeout". The limit is far above a step's normal
// time (it is a hang detector, not a timing assertion).
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

namespace kvfs::testing {

class HangWatch {
 public:
  explicit HangWatch(std::chrono::seconds limit);
  ~HangWatch();
  HangWatch(const HangWatch&) = delete;
  HangWatch& operator=(const HangWatch&) = delete;

  // Names what the test does now and restarts the clock.
  void Step(std::string where);

 private:
  void Watch();

  const std::chrono::seconds limit_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string where_ = "start";
  uint64_t steps_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace kvfs::testing
