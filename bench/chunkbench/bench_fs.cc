#include "bench_fs.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace kvfs::bench {
namespace {

constexpr size_t kIo = 1 << 20;

double ProcessCpu() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// Content is a function of (file, offset) so reads can be verified without keeping copies.
void Fill(char* buf, size_t len, uint64_t file, uint64_t offset) {
  auto* w = reinterpret_cast<uint64_t*>(buf);
  for (size_t i = 0; i < len / 8; ++i)
    w[i] = (file << 40) ^ (offset / 8 + i) * 0x9E3779B97F4A7C15ull;
}

// Runs fn(thread, first, last) over [0, n) split across threads and times it.
Result<Measure> Timed(int n, int threads, const std::function<Status(int, int, int)>& fn) {
  std::vector<std::thread> pool;
  std::vector<Status> errors(threads);
  double cpu0 = ProcessCpu();
  auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t) {
    int first = n * t / threads, last = n * (t + 1) / threads;
    pool.emplace_back([&, t, first, last] { errors[t] = fn(t, first, last); });
  }
  for (auto& th : pool) th.join();
  Measure m;
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  m.cpu_seconds = ProcessCpu() - cpu0;
  for (auto& e : errors)
    if (!e.ok()) return e;
  return m;
}

Status Errno(const std::string& what, const std::string& path) {
  return Status::Error(errno, what + " " + path + ": " + std::strerror(errno));
}

struct AlignedFree {
  void operator()(char* p) const { std::free(p); }
};
std::unique_ptr<char, AlignedFree> Buffer(size_t len) {
  return std::unique_ptr<char, AlignedFree>(static_cast<char*>(std::aligned_alloc(4096, len)));
}

}  // namespace

std::string FileName(int index) {
  char name[64];
  // Prefix-hash-like names, as connectors use.
  std::snprintf(name, sizeof name, "%016llx%016llx.kv",
                static_cast<unsigned long long>(index * 0x9E3779B97F4A7C15ull),
                static_cast<unsigned long long>(index * 0xC2B2AE3D27D4EB4Full));
  return name;
}

Result<Measure> WriteFiles(const Workload& w, bool datasync) {
  ::mkdir(w.dir.c_str(), 0755);
  auto r = Timed(w.files, w.threads, [&](int t, int first, int last) -> Status {
    auto buf = Buffer(kIo);
    for (int i = first; i < last; ++i) {
      std::string final_path = w.dir + "/" + FileName(i);
      std::string tmp = final_path + ".tmp." + std::to_string(t);
      int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) return Errno("open", tmp);
      for (uint64_t off = 0; off < w.file_size; off += kIo) {
        size_t len = std::min<uint64_t>(kIo, w.file_size - off);
        Fill(buf.get(), len, i, off);
        if (::write(fd, buf.get(), len) != static_cast<ssize_t>(len)) {
          ::close(fd);
          return Errno("write", tmp);
        }
      }
      if (datasync && ::fdatasync(fd) != 0) {
        ::close(fd);
        return Errno("fdatasync", tmp);
      }
      if (::close(fd) != 0) return Errno("close", tmp);
      if (::rename(tmp.c_str(), final_path.c_str()) != 0) return Errno("rename", tmp);
    }
    return Status::Ok();
  });
  if (!r.ok()) return r.status();
  r->bytes = w.file_size * static_cast<uint64_t>(w.files);
  r->value = static_cast<double>(r->bytes) / (1 << 20) / r->seconds;
  r->unit = "MiB/s";
  return r;
}

Result<Measure> ReadFiles(const Workload& w, bool direct) {
  auto r = Timed(w.files, w.threads, [&](int, int first, int last) -> Status {
    auto buf = Buffer(w.file_size + 4096);
    auto expect = Buffer(kIo);
    for (int i = first; i < last; ++i) {
      std::string path = w.dir + "/" + FileName(i);
      int fd = ::open(path.c_str(), O_RDONLY | (direct ? O_DIRECT : 0));
      if (fd < 0) return Errno("open", path);
      uint64_t got = 0;
      while (got < w.file_size) {
        const uint64_t want =
            direct ? std::min<uint64_t>(kIo, w.file_size - got) : w.file_size - got;
        ssize_t n = ::read(fd, buf.get() + got, want);
        if (n < 0) {
          ::close(fd);
          return Errno("read", path);
        }
        if (n == 0) break;
        got += static_cast<uint64_t>(n);
      }
      ::close(fd);
      if (got != w.file_size) return Status::IoError("short read of " + path);
      // Spot-check the first and last MiB: full verification would measure memcmp.
      for (uint64_t off : {uint64_t{0}, w.file_size > kIo ? w.file_size - kIo : 0}) {
        size_t len = std::min<uint64_t>(kIo, w.file_size - off);
        Fill(expect.get(), len, i, off);
        if (std::memcmp(expect.get(), buf.get() + off, len) != 0)
          return Status::IoError("wrong bytes in " + path);
      }
    }
    return Status::Ok();
  });
  if (!r.ok()) return r.status();
  r->bytes = w.file_size * static_cast<uint64_t>(w.files);
  r->value = static_cast<double>(r->bytes) / (1 << 20) / r->seconds;
  r->unit = "MiB/s";
  return r;
}

static Result<Measure> StatLoop(int total, int threads,
                                const std::function<std::string(int)>& name_of,
                                bool expect_exists) {
  auto r = Timed(total, threads, [&](int, int first, int last) -> Status {
    struct stat st;
    for (int i = first; i < last; ++i) {
      std::string path = name_of(i);
      int rc = ::stat(path.c_str(), &st);
      if (expect_exists && rc != 0) return Errno("stat", path);
      if (!expect_exists && (rc == 0 || errno != ENOENT))
        return Status::IoError("expected ENOENT for " + path);
    }
    return Status::Ok();
  });
  if (!r.ok()) return r.status();
  r->value = total / r->seconds;
  r->unit = "ops/s";
  return r;
}

Result<Measure> LookupHits(const Workload& w, int rounds) {
  return StatLoop(
      w.files * rounds, w.threads, [&](int i) { return w.dir + "/" + FileName(i % w.files); },
      true);
}

Result<Measure> LookupMissesDistinct(const std::string& dir, int count, int threads) {
  static std::atomic<int> generation{0};
  std::string tag = "miss" + std::to_string(generation++) + "-";
  return StatLoop(
      count, threads, [&](int i) { return dir + "/" + tag + FileName(i); }, false);
}

Result<Measure> LookupMissesRepeated(const std::string& dir, int names, int rounds, int threads) {
  return StatLoop(
      names * rounds, threads, [&](int i) { return dir + "/absent-" + FileName(i % names); },
      false);
}

Result<Measure> SmallPublish(const std::string& dir, uint64_t size, int count, int threads) {
  ::mkdir(dir.c_str(), 0755);
  auto r = Timed(count, threads, [&](int t, int first, int last) -> Status {
    auto buf = Buffer(size);
    for (int i = first; i < last; ++i) {
      std::string final_path = dir + "/small-" + FileName(i);
      std::string tmp = final_path + ".tmp." + std::to_string(t);
      Fill(buf.get(), size, i, 0);
      int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) return Errno("open", tmp);
      if (::write(fd, buf.get(), size) != static_cast<ssize_t>(size)) {
        ::close(fd);
        return Errno("write", tmp);
      }
      if (::close(fd) != 0) return Errno("close", tmp);
      if (::rename(tmp.c_str(), final_path.c_str()) != 0) return Errno("rename", tmp);
    }
    return Status::Ok();
  });
  if (!r.ok()) return r.status();
  r->value = count / r->seconds;
  r->unit = "ops/s";
  r->bytes = size * static_cast<uint64_t>(count);
  return r;
}

namespace {

// Sectors written and discarded, and I/Os in flight, summed over /proc/diskstats.
uint64_t DiskActivity() {
  std::FILE* f = std::fopen("/proc/diskstats", "r");
  if (!f) return 0;
  uint64_t sum = 0;
  char line[512];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long long v[17] = {};
    char name[64];
    // major minor name, then reads(4), writes(4), in flight, io ticks, weighted, discards(4)
    const int n = std::sscanf(line,
                              "%llu %llu %63s %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu "
                              "%llu %llu %llu %llu %llu",
                              &v[0], &v[1], name, &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8],
                              &v[9], &v[10], &v[11], &v[12], &v[13], &v[14], &v[15], &v[16]);
    if (n >= 12) sum += v[8] + v[10];  // sectors written, I/Os in flight
    if (n >= 17) sum += v[15];         // sectors discarded
  }
  std::fclose(f);
  return sum;
}

}  // namespace

bool DropCaches() {
  ::sync();
  int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY);
  if (fd < 0) return false;
  bool ok = ::write(fd, "3", 1) == 1;
  ::close(fd);
  // Dropping the caches makes the kernel forget inodes, so a FUSE daemon (the passthrough
  // column) closes the files it still held, and the file system frees the blocks of those that
  // were replaced since: on a disk mounted with `discard`, 768 MiB of discards issued in the
  // next timed pass (seen in /proc/diskstats during kvfs's cold read, which ran at 0.75-0.8x
  // native in a row after a passthrough row and at 1.04-1.07x without one). Wait until the disk
  // has been quiet for two 250 ms windows in a row, at most 10 s.
  int quiet = 0;
  for (int i = 0; i < 40 && quiet < 2; ++i) {
    ::sync();
    const uint64_t before = DiskActivity();
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    quiet = DiskActivity() == before ? quiet + 1 : 0;
  }
  return ok;
}

}  // namespace kvfs::bench
