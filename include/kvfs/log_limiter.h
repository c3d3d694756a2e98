// LogLimiter: at most `burst` log lines per window for events that come as fast as somebody
// else makes them: garbage on the peer port (a port scan, a flood of bad connections), or a
// connector retrying operations that fail (a full, read-only store). Without it each writes
// one warning, as fast as they come, into the operator's log (perhaps on the very disk that is
// full); with it the first lines of each window still say who and what, and the next line let
// through says how many were left out.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace kvfs {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  LogLimiter(uint32_t burst, Clock::duration window) : burst_(burst), window_(window) {}

  // Whether a line may be logged now. When it may, `note` is empty or says how many lines were
  // left out since the last one let through (to be appended to the line).
  bool Allow(std::string* note, Clock::time_point now = Clock::now()) {
    std::lock_guard lock(mu_);
    if (now - window_start_ >= window_) {
      window_start_ = now;
      used_ = 0;
    }
    if (used_ >= burst_) {
      ++left_out_;
      return false;
    }
    ++used_;
    note->clear();
    if (left_out_ > 0) {
      *note = " (" + std::to_string(left_out_) + " similar lines left out)";
      left_out_ = 0;
    }
    return true;
  }

 private:
  const uint32_t burst_;
  const Clock::duration window_;
  std::mutex mu_;
  Clock::time_point window_start_{};
  uint32_t used_ = 0;
  uint64_t left_out_ = 0;
};

}  // namespace kvfs
