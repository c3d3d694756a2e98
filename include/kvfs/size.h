// Byte sizes as users write them: "512", "64K", "8M", "2G", "1T" (powers of 1024, an optional
// trailing "B" or "iB" is accepted). Header-only: every layer parses sizes.
#pragma once

#include <cctype>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "kvfs/status.h"

namespace kvfs {

inline Result<uint64_t> ParseSize(std::string_view text) {
  const std::string original(text);
  if (text.empty()) return Status::Invalid("empty size");
  size_t i = 0;
  uint64_t value = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    uint64_t next = value * 10 + static_cast<uint64_t>(text[i] - '0');
    if (next / 10 != value) return Status::Invalid("size too large: " + original);
    value = next;
    ++i;
  }
  if (i == 0) return Status::Invalid("size must start with a number: " + original);
  std::string suffix;
  for (; i < text.size(); ++i) suffix += static_cast<char>(std::toupper(text[i]));
  if (suffix == "IB") suffix = "";
  if (suffix.size() == 3 && suffix.substr(1) == "IB") suffix = suffix.substr(0, 1);
  if (suffix.size() == 2 && suffix[1] == 'B') suffix = suffix.substr(0, 1);
  if (suffix == "B") suffix = "";
  int shift = 0;
  if (suffix.empty())
    shift = 0;
  else if (suffix == "K")
    shift = 10;
  else if (suffix == "M")
    shift = 20;
  else if (suffix == "G")
    shift = 30;
  else if (suffix == "T")
    shift = 40;
  else
    return Status::Invalid("unknown size suffix in '" + original + "' (use K, M, G or T)");
  if (shift > 0 && (value >> (64 - shift)) != 0)
    return Status::Invalid("size too large: " + original);
  return value << shift;
}

inline std::string FormatSize(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  return buf;
}

}  // namespace kvfs
