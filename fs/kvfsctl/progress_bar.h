// kvfsctl: a one-line progress bar on standard error, drawn only when stderr is a terminal (so
// pipes, logs and tests see just the final report). Shared by verify and prefetch.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace kvfs::fs {

class ProgressBar {
 public:
  ProgressBar();
  // done of total files, bytes so far; redraws at most every 100 ms and on the last file.
  void Update(size_t done, size_t total, uint64_t bytes);
  // Ends the line, if one was drawn.
  void Finish();
  double Seconds() const;

 private:
  bool tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

}  // namespace kvfs::fs
