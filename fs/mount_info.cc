#include "mount_info.h"

#include <cstdio>
#include <fstream>
#include <sstream>

namespace kvfs::fs {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string Unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      int v = 0;
      bool ok = true;
      for (size_t k = 1; k <= 3; ++k) {
        char c = s[i + k];
        if (c < '0' || c > '7') ok = false;
        v = v * 8 + (c - '0');
      }
      if (ok) {
        out += static_cast<char>(v);
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

}  // namespace

std::vector<MountEntry> ReadMountInfo(const std::string& path) {
  std::vector<MountEntry> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string id, parent, devno, root, mount_point;
    if (!(fields >> id >> parent >> devno >> root >> mount_point)) continue;
    MountEntry e;
    e.mount_point = Unescape(mount_point);
    if (std::sscanf(devno.c_str(), "%u:%u", &e.major, &e.minor) != 2) continue;
    // Optional fields run up to a lone "-", then fstype and source.
    std::string word;
    while (fields >> word && word != "-") {
    }
    fields >> e.fstype >> e.source;
    e.source = Unescape(e.source);
    out.push_back(std::move(e));
  }
  return out;
}

std::optional<MountEntry> FindMount(const std::vector<MountEntry>& mounts,
                                    const std::string& path) {
  std::optional<MountEntry> best;
  for (const auto& m : mounts) {
    const std::string& mp = m.mount_point;
    bool prefix =
        mp == "/" || path == mp ||
        (path.size() > mp.size() && path.compare(0, mp.size(), mp) == 0 && path[mp.size()] == '/');
    if (prefix && (!best || mp.size() >= best->mount_point.size())) best = m;
  }
  return best;
}

}  // namespace kvfs::fs
