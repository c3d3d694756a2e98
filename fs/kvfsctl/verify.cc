// kvfsctl verify: reads and checksums every file under the given paths through the mount's
// user.kvfs.verify xattr (the daemon reads every segment; a corrupt file answers EIO and is
// dropped from the cache), with a progress bar on a terminal and a report at the end.
// Exit status: 0 every file ok, 1 corruption or errors found.
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvfs/size.h"

namespace kvfs::fs {
namespace {

struct Target {
  std::string path;
  uint64_t size = 0;
};

// Regular files under `path` (or `path` itself), without following symlinks.
void Collect(const std::string& path, std::vector<Target>* out, std::vector<std::string>* errors) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    errors->push_back(path + ": " + std::strerror(errno));
    return;
  }
  if (S_ISREG(st.st_mode)) {
    out->push_back({path, static_cast<uint64_t>(st.st_size)});
    return;
  }
  if (!S_ISDIR(st.st_mode)) return;
  std::error_code ec;
  auto it = std::filesystem::recursive_directory_iterator(
      path, std::filesystem::directory_options::skip_permission_denied, ec);
  if (ec) {
    errors->push_back(path + ": " + ec.message());
    return;
  }
  for (auto end = std::filesystem::recursive_directory_iterator(); it != end; it.increment(ec)) {
    if (ec) {
      errors->push_back(path + ": " + ec.message());
      break;
    }
    if (it->is_regular_file(ec) && !it->is_symlink(ec))
      out->push_back({it->path().string(), it->file_size(ec)});
  }
}

void Progress(size_t done, size_t total, uint64_t bytes, double seconds) {
  constexpr int kWidth = 30;
  const int filled = total ? static_cast<int>(kWidth * done / total) : kWidth;
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, ' ');
  const double rate = seconds > 0 ? static_cast<double>(bytes) / seconds : 0;
  std::fprintf(stderr, "\r[%s] %zu/%zu files, %s, %s/s ", bar.c_str(), done, total,
               FormatSize(bytes).c_str(), FormatSize(static_cast<uint64_t>(rate)).c_str());
}

}  // namespace

int Verify(const std::vector<std::string>& paths, bool json) {
  std::vector<Target> targets;
  std::vector<std::string> errors, corrupt;
  for (const auto& p : paths) Collect(p, &targets, &errors);
  const bool tty = ::isatty(STDERR_FILENO) == 1;
  const auto start = std::chrono::steady_clock::now();
  uint64_t bytes = 0;
  size_t ok = 0, vanished = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    const Target& t = targets[i];
    char value[64];
    if (::lgetxattr(t.path.c_str(), "user.kvfs.verify", value, sizeof value) >= 0) {
      ++ok;
      bytes += t.size;
    } else if (errno == EIO) {
      corrupt.push_back(t.path);
      bytes += t.size;
    } else if (errno == ENOENT) {
      ++vanished;  // unlinked or evicted since the walk: nothing left to check
    } else {
      errors.push_back(t.path + ": " + std::strerror(errno));
    }
    if (tty) {
      Progress(i + 1, targets.size(), bytes,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
  if (tty) std::fputc('\n', stderr);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const size_t checked = ok + corrupt.size();
  if (json) {
    nlohmann::json report{{"files", checked},
                          {"bytes", bytes},
                          {"ok", ok},
                          {"corrupt", corrupt},
                          {"dropped", corrupt.size()},
                          {"vanished", vanished},
                          {"errors", errors},
                          {"seconds", seconds}};
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    std::printf("checked %zu files, %s in %.1f s\n", checked, FormatSize(bytes).c_str(), seconds);
    std::printf("  ok        %zu\n", ok);
    std::printf("  corrupt   %zu (dropped from the cache)\n", corrupt.size());
    for (const auto& c : corrupt) std::printf("    %s\n", c.c_str());
    if (vanished) std::printf("  vanished  %zu (removed while verifying)\n", vanished);
    if (!errors.empty()) std::printf("  errors    %zu\n", errors.size());
    for (const auto& e : errors) std::printf("    %s\n", e.c_str());
  }
  return corrupt.empty() && errors.empty() ? 0 : 1;
}

}  // namespace kvfs::fs
