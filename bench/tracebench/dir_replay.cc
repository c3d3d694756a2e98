#include "dir_replay.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <unordered_set>

namespace kvfs::tracebench {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string BlockPath(const std::string& dir, uint64_t block) {
  return dir + "/" + std::to_string(block) + ".kv";
}

// Reads the whole file; false on any error or short read.
bool ReadAll(const std::string& path, std::string* out, uint64_t expect) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  out->resize(expect);
  size_t got = 0;
  while (got < expect) {
    ssize_t n = ::read(fd, out->data() + got, expect - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  return got == expect;
}

// `parent`: the name to set as user.kvfs.parent before the publish (empty: none); a refused
// link counts in *xattr_failures and does not fail the write.
bool WriteBlock(const std::string& path, const std::string& bytes, const std::string& parent,
                uint64_t* xattr_failures) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  if (!parent.empty() &&
      ::fsetxattr(fd, "user.kvfs.parent", parent.data(), parent.size(), 0) != 0) {
    ++*xattr_failures;
  }
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  bool ok = done == bytes.size();
  ok = (::close(fd) == 0) && ok;
  if (ok) ok = ::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) ::unlink(tmp.c_str());
  return ok;
}

}  // namespace

void FillBlock(uint64_t block, uint64_t size, std::string* out) {
  out->resize(size);
  uint64_t x = block * 0x9E3779B97F4A7C15ull + 1;
  for (uint64_t off = 0; off < size; off += 8) {
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    x ^= x >> 29;
    std::memcpy(out->data() + off, &x, std::min<uint64_t>(8, size - off));
  }
}

Result<DirReplayResult> ReplayThroughDirectory(const std::vector<eviction::TraceRequest>& trace,
                                               const DirReplayOptions& options) {
  struct stat st;
  if (::stat(options.dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return Status::NotFound("not a directory: " + options.dir);
  }
  DirReplayResult out;
  struct statvfs vfs;
  if (::statvfs(options.dir.c_str(), &vfs) == 0) {
    out.fs_capacity_bytes = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  }
  auto& r = out.replay;
  std::unordered_set<uint64_t> ever;
  std::string expect, got;
  const auto start = Clock::now();
  const uint64_t t0 = trace.empty() ? 0 : trace.front().timestamp_ms;
  for (const auto& req : trace) {
    if (options.time_scale > 0) {
      auto due = start + std::chrono::duration<double, std::milli>(double(req.timestamp_ms - t0) *
                                                                   options.time_scale);
      std::this_thread::sleep_until(due);
    }
    const size_t n = req.blocks.size();
    ++r.requests;
    r.blocks += n;
    size_t hits = 0;
    for (; hits < n; ++hits) {
      const std::string path = BlockPath(options.dir, req.blocks[hits]);
      ++out.lookups;
      struct stat bst;
      if (::stat(path.c_str(), &bst) != 0) break;
      auto t = Clock::now();
      bool ok = ReadAll(path, &got, options.block_bytes);
      out.read_seconds += Since(t);
      if (!ok) break;  // evicted between stat and read: a miss
      FillBlock(req.blocks[hits], options.block_bytes, &expect);
      if (got != expect) {
        ++out.verify_failures;
        break;
      }
      r.bytes_read += options.block_bytes;
    }
    size_t reusable = 0;
    while (reusable < n && ever.count(req.blocks[reusable])) ++reusable;
    r.block_hits += hits;
    r.reusable_blocks += reusable;
    if (reusable > 0) {
      ++r.reuse_requests;
      if (hits >= reusable) ++r.full_requests;
    }
    r.hit_blocks.push_back(static_cast<uint32_t>(hits));
    for (size_t j = 0; j < n; ++j) ever.insert(req.blocks[j]);
    for (size_t j = hits; j < n; ++j) {
      FillBlock(req.blocks[j], options.block_bytes, &expect);
      auto t = Clock::now();
      std::string parent;
      if (options.parent_xattr && j > 0) parent = std::to_string(req.blocks[j - 1]) + ".kv";
      bool ok =
          WriteBlock(BlockPath(options.dir, req.blocks[j]), expect, parent, &out.xattr_failures);
      out.write_seconds += Since(t);
      if (ok)
        r.bytes_written += options.block_bytes;
      else
        ++out.write_failures;
    }
  }
  out.total_seconds = Since(start);
  return out;
}

}  // namespace kvfs::tracebench
