// kvfsctl: the regular files under a list of paths, for the commands that work file by file
// (verify, prefetch). Symlinks are not followed: a link out of the mount must not make kvfsctl
// read another file system.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvfs::fs {

struct FileTarget {
  std::string path;
  uint64_t size = 0;  // at the time of the walk
};

struct FileWalk {
  std::vector<FileTarget> files;
  std::vector<std::string> missing;  // paths given that do not exist
  std::vector<std::string> errors;   // "path: reason" for anything else that failed
};

// Appends the regular files at or under `path` (directories recurse) to `walk`.
void CollectFiles(const std::string& path, FileWalk* walk);

}  // namespace kvfs::fs
