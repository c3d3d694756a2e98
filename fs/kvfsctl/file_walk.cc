#include "file_walk.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace kvfs::fs {

void CollectFiles(const std::string& path, FileWalk* walk) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT)
      walk->missing.push_back(path);
    else
      walk->errors.push_back(path + ": " + std::strerror(errno));
    return;
  }
  if (S_ISREG(st.st_mode)) {
    walk->files.push_back({path, static_cast<uint64_t>(st.st_size)});
    return;
  }
  if (!S_ISDIR(st.st_mode)) return;
  std::error_code ec;
  auto it = std::filesystem::recursive_directory_iterator(
      path, std::filesystem::directory_options::skip_permission_denied, ec);
  if (ec) {
    walk->errors.push_back(path + ": " + ec.message());
    return;
  }
  for (auto end = std::filesystem::recursive_directory_iterator(); it != end; it.increment(ec)) {
    if (ec) {
      walk->errors.push_back(path + ": " + ec.message());
      break;
    }
    if (it->is_regular_file(ec) && !it->is_symlink(ec))
      walk->files.push_back({it->path().string(), it->file_size(ec)});
  }
}

}  // namespace kvfs::fs
