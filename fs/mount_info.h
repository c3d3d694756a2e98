// Reading /proc/self/mountinfo: the daemon finds its own mount's device number (for the bdi
// readahead) and kvfsctl checks that a path really lies on a fuse.kvfs mount.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "kvfs/status.h"

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

// A daemon killed without unmounting leaves its mount behind: every request to it fails with
// ENOTCONN (stat may still answer from the kernel's attribute cache) until someone detaches it,
// and a restarted daemon would mount on top of it. `ProbeMount` says whether a filesystem is
// mounted on exactly `path` (absolute, normalized) and whether it answers a statfs, which
// always reaches the daemon; a child process asks, so a frozen daemon cannot hang the caller.
enum class MountState { kNone, kAnswering, kDead, kNotAnswering };
MountState ProbeMount(const std::string& path, std::string* fstype);
// Detaches the mount on `path` lazily, like `fusermount3 -u -z` (umount2 as root, the setuid
// fusermount3 otherwise).
Status DetachMount(const std::string& path);

}  // namespace kvfs::fs
