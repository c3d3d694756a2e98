#include "progress_bar.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "kvfs/size.h"

namespace kvfs::fs {

ProgressBar::ProgressBar()
    : tty_(::isatty(STDERR_FILENO) == 1), start_(std::chrono::steady_clock::now()) {}

double ProgressBar::Seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressBar::Update(size_t done, size_t total, uint64_t bytes) {
  if (!tty_) return;
  const auto now = std::chrono::steady_clock::now();
  // Redrawing per file would spend more time on the terminal than on small files.
  if (drawn_ && done < total && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  drawn_ = true;
  constexpr int kWidth = 30;
  const int filled = total ? static_cast<int>(kWidth * done / total) : kWidth;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, ' ');
  const double seconds = Seconds();
  const double rate = seconds > 0 ? static_cast<double>(bytes) / seconds : 0;
  std::fprintf(stderr, "\r[%s] %zu/%zu files, %s, %s/s ", bar.c_str(), done, total,
               FormatSize(bytes).c_str(), FormatSize(static_cast<uint64_t>(rate)).c_str());
}

void ProgressBar::Finish() {
  if (drawn_) std::fputc('\n', stderr);
  drawn_ = false;
}

}  // namespace kvfs::fs
