// The open-file state: a WriteSession (the staging of a file's next version, shared by its
// writable handles) and a FileHandle (what fuse_file_info::fh points to). The Namespace
// (file_handle.cc) creates and uses them; they live here so that the namespace's tree and its
// open files are read separately.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "kvfs/chunk_reader.h"
#include "kvfs/chunk_store.h"
#include "kvfs/object.h"

namespace kvfs::fs {

// The staging of the next version of one file, shared by every handle open for writing on it.
struct WriteSession {
  std::mutex mu;
  std::unique_ptr<ChunkWriter> writer;
  bool dirty = false;             // written, truncated or created since the last publish
  std::atomic<uint64_t> size{0};  // writer->size(), readable without `mu` for getattr
  uint32_t handles = 0;           // guarded by Namespace::mu_
  uint64_t view = 0;              // its view's id for the page cache (OpenState::cache_view)
  // Its last event was a close (FLUSH) that left nothing private, and no handle opened it since.
  // The kernel sends RELEASE after close(2) returns, so a session outlives its writers' closes
  // for a moment: a truncate by path meanwhile is published at once (SetAttrOnce), and a
  // reader's open waits for that RELEASE (Open). Set under `mu`; cleared by an open under
  // Namespace::mu_ (which must not take `mu`).
  std::atomic<bool> closed{false};
  // Set-id bits a write of this session dropped (Namespace::Write): each publish drops them
  // again, since another node's change to the record, applied meanwhile, brings back the mode
  // it had (and the new bytes would go out under the old bits). A chmod here clears it.
  std::atomic<uint32_t> setid_dropped{0};
};

// How many FileHandles exist in this process (`open_files` in .kvfs/stats). The kernel sends
// RELEASE after close(2) returns; a handle leaves the count once it and its reader are gone
// (read-ahead counted wasted included), so a caller can wait for a close to be done.
class OpenFileCount {
 public:
  OpenFileCount() { count_.fetch_add(1, std::memory_order_relaxed); }
  ~OpenFileCount() { count_.fetch_sub(1, std::memory_order_release); }
  OpenFileCount(const OpenFileCount&) = delete;
  OpenFileCount& operator=(const OpenFileCount&) = delete;
  static uint64_t now() { return count_.load(std::memory_order_acquire); }

 private:
  static inline std::atomic<uint64_t> count_{0};
};

// One open file: what fuse_file_info::fh points to.
struct FileHandle {
  OpenFileCount counted;  // first member: destroyed last, after the reader
  uint64_t ino = 0;
  bool can_write = false;
  LayoutRef layout;                       // read-only handles: the version current at open
  std::shared_ptr<WriteSession> session;  // writable handles
  // Read-only handles on a store that has one: verified segments, read ahead (file_handle.cc).
  std::unique_ptr<ChunkReader> reader;
  // What the kernel is told at open.
  bool direct_io = false;
  bool keep_cache = false;
  // Opened with O_NOATIME (the kernel checked the caller may): reads leave atime alone, so a
  // backup or checksum scan does not reorder an atime-based evictor's view.
  bool noatime = false;
  // The second (CLOCK_REALTIME) of this handle's last atime update: reads in the same second
  // leave the namespace lock alone (Namespace::NoteRead).
  std::atomic<int64_t> atime_second{0};
  // O_APPEND: every write lands at the end of the session's content, wherever the kernel
  // thought the end was (its i_size may describe another handle's view).
  bool append = false;
  // Reads and writes go through the kernel's page cache (not direct_io): the handle is one of
  // its inode's cache_handles, on view `view`.
  bool page_cache = false;
  uint64_t view = 0;
};

}  // namespace kvfs::fs
