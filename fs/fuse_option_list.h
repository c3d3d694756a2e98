// A -o option list as libfuse reads it (fuse_opt.c, process_real_option_group): options are
// split at commas, and a backslash escapes the next character, or stands for the byte of three
// octal digits after it (`\054` is a comma). kvfs and mount.kvfs look at some options before
// libfuse does (config=, max_read=, subtype=); they must see the same options libfuse will.
// Header-only: mount.kvfs links nothing of the fs layer.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kvfs::fs {

// The options of `list`, escapes kept: joined again with commas they are `list` again.
inline std::vector<std::string> SplitOptionList(std::string_view list) {
  std::vector<std::string> out(1);
  for (size_t i = 0; i < list.size(); ++i) {
    const char c = list[i];
    if (c == '\\' && i + 1 < list.size()) {
      out.back() += c;
      out.back() += list[++i];
    } else if (c == ',') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

// One option as libfuse takes it: escapes resolved.
inline std::string UnescapeOption(std::string_view option) {
  std::string out;
  for (size_t i = 0; i < option.size(); ++i) {
    if (option[i] != '\\' || i + 1 == option.size()) {
      out += option[i];
      continue;
    }
    const auto octal = [&](size_t k, char hi) {
      return k < option.size() && option[k] >= '0' && option[k] <= hi;
    };
    if (octal(i + 1, '3') && octal(i + 2, '7') && octal(i + 3, '7')) {
      out += static_cast<char>((option[i + 1] - '0') * 64 + (option[i + 2] - '0') * 8 +
                               (option[i + 3] - '0'));
      i += 3;
    } else {
      out += option[++i];
    }
  }
  return out;
}

}  // namespace kvfs::fs
