// kvfsctl prefetch PATH...: warms files so the next reader finds them in memory. Each file is
// read once, whole, through the mount: published files are opened with keep_cache, so what the
// read brings in stays in the kernel's page cache for later opens, and the daemon reads it from
// its engine (or, on a cluster node, fetches it from the node that holds it). posix_fadvise
// WILLNEED first lets the kernel start readahead while we read.
//
// Exit status: 0 when every file was read, 1 when a path was missing or a read failed.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "file_walk.h"
#include "json_text.h"
#include "kvfs/size.h"
#include "kvfsctl.h"
#include "progress_bar.h"

namespace kvfs::fs {
namespace {

constexpr size_t kReadSize = 1 << 20;  // the FUSE request size: one READ per call

// Bytes of the file already in the page cache (mincore of a read-only mapping); 0 when the
// file cannot be mapped. Only a report: prefetch reads every file either way.
uint64_t CachedBytes(int fd, uint64_t size) {
  if (size == 0) return 0;
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) return 0;
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> resident((size + page - 1) / page);
  uint64_t cached = 0;
  if (::mincore(map, size, resident.data()) == 0) {
    for (size_t i = 0; i < resident.size(); ++i) {
      if (resident[i] & 1) cached += std::min(page, size - i * page);
    }
  }
  ::munmap(map, size);
  return cached;
}

struct FileResult {
  uint64_t bytes = 0;
  uint64_t cached_before = 0;
  int err = 0;  // errno of the failure, 0 when read to the end
};

FileResult ReadWhole(const std::string& path, char* buf) {
  FileResult r;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    r.err = errno;
    return r;
  }
  struct stat st {};
  if (::fstat(fd, &st) == 0) {
    r.cached_before = CachedBytes(fd, static_cast<uint64_t>(st.st_size));
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
  }
  for (;;) {
    ssize_t n = ::read(fd, buf, kReadSize);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      r.err = errno;
      break;
    }
    if (n == 0) break;
    r.bytes += static_cast<uint64_t>(n);
  }
  ::close(fd);
  return r;
}

}  // namespace

int Prefetch(const std::vector<std::string>& paths, bool json) {
  FileWalk walk;
  for (const auto& p : paths) CollectFiles(p, &walk);
  std::vector<std::string> missing = walk.missing, errors = walk.errors;
  std::unique_ptr<char[]> buf(new char[kReadSize]);
  ProgressBar progress;
  uint64_t bytes = 0, cached_before = 0;
  size_t warmed = 0;
  for (size_t i = 0; i < walk.files.size(); ++i) {
    const FileTarget& t = walk.files[i];
    FileResult r = ReadWhole(t.path, buf.get());
    bytes += r.bytes;
    cached_before += r.cached_before;
    if (r.err == 0)
      ++warmed;
    else if (r.err == ENOENT)
      missing.push_back(t.path);  // unlinked or evicted since the walk
    else
      errors.push_back(t.path + ": " + std::strerror(r.err));
    progress.Update(i + 1, walk.files.size(), bytes);
  }
  progress.Finish();
  const double seconds = progress.Seconds();
  const double rate = seconds > 0 ? static_cast<double>(bytes) / seconds : 0.0;
  if (json) {
    nlohmann::json report{{"files", warmed},
                          {"bytes", bytes},
                          {"seconds", seconds},
                          {"bytes_per_s", rate},
                          {"cached_before_bytes", cached_before},
                          {"misses", missing.size()},
                          {"missing", missing},
                          {"errors", errors}};
    std::printf("%s\n", JsonText(report, 2).c_str());
  } else {
    std::printf("prefetched %zu files, %s in %.2f s (%s/s); %s were already cached\n", warmed,
                FormatSize(bytes).c_str(), seconds, FormatSize(static_cast<uint64_t>(rate)).c_str(),
                FormatSize(cached_before).c_str());
    if (!missing.empty()) std::printf("  misses    %zu (no such file)\n", missing.size());
    for (const auto& m : missing) std::printf("    %s\n", m.c_str());
    if (!errors.empty()) std::printf("  errors    %zu\n", errors.size());
    for (const auto& e : errors) std::printf("    %s\n", e.c_str());
  }
  return missing.empty() && errors.empty() ? kExitOk : kExitFailure;
}

}  // namespace kvfs::fs
