// Reading /proc/self/mountinfo: the daemon finds its own mount's device number (for the bdi
// readahead) and kvfsctl checks that a path really lies on a fuse.kvfs mount.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace kvfs::fs {

struct MountEntry {
  std::string mount_point;
  std::string fstype;  // "fuse.kvfs" for ours
  std::string source;
  unsigned major = 0, minor = 0;
};

std::vector<MountEntry> ReadMountInfo(const std::string& path = "/proc/self/mountinfo");
// The mount holding `path` (an absolute, symlink-free path): the last-listed mount whose mount
// point is the longest prefix of it.
std::optional<MountEntry> FindMount(const std::vector<MountEntry>& mounts, const std::string& path);

}  // namespace kvfs::fs
