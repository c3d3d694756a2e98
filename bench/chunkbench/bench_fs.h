// The file workloads chunkbench runs, each against one directory: the same code measures the
// kvfs mount and the native directory, so the ratio compares like with like.
#pragma once

#include <cstdint>
#include <string>

#include "kvfs/status.h"

namespace kvfs::bench {

struct Measure {
  double value = 0;        // in `unit`
  std::string unit;        // "MiB/s" or "ops/s"
  double seconds = 0;      // wall time of the timed part
  double cpu_seconds = 0;  // this process's user+system CPU during the timed part
  uint64_t bytes = 0;      // bytes moved (0 for metadata tests)
};

struct Workload {
  std::string dir;  // where the files go (created)
  uint64_t file_size = 0;
  int files = 0;
  int threads = 1;
};

// Writes `files` files of `file_size` bytes with 1 MiB write(2) calls from `threads` threads;
// with `datasync` each file is fdatasync'ed before close. Publishes by temp file + rename, as
// connectors do.
Result<Measure> WriteFiles(const Workload& w, bool datasync);
// Reads every file whole (buffer of the file size, as connectors do) and checks its bytes.
// `direct`: O_DIRECT reads of 1 MiB instead (through kvfs every one is served by the daemon).
Result<Measure> ReadFiles(const Workload& w, bool direct = false);
// stat() of every existing file, `rounds` times.
Result<Measure> LookupHits(const Workload& w, int rounds);
// stat() of `count` distinct names that do not exist.
Result<Measure> LookupMissesDistinct(const std::string& dir, int count, int threads);
// stat() of the same `names` missing names, `rounds` times.
Result<Measure> LookupMissesRepeated(const std::string& dir, int names, int rounds, int threads);
// Create temp + write `size` bytes + close + rename, `count` times.
Result<Measure> SmallPublish(const std::string& dir, uint64_t size, int count, int threads);
// Drops the kernel page cache (needs root); false when it could not.
bool DropCaches();

std::string FileName(int index);

}  // namespace kvfs::bench
