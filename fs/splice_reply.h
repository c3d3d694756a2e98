// Answers FUSE READs from verified store buffers without copying them in the daemon: the bytes
// are vmspliced into a per-thread pipe and handed to fuse_reply_data as a FUSE_BUF_IS_FD
// buffer, so libfuse splices them (pipe -> its pipe -> /dev/fuse) and the kernel copies each
// byte once, into the page cache.
//
// libfuse 3.14 splices a reply only if its own per-thread pipe holds header + data + 3 pages;
// otherwise it silently reads the pipe back and copies. A pipe can grow past fs.pipe-max-size
// (1 MiB by default) only with CAP_SYS_RESOURCE, so the session caps READs at
// kMaxSplicedRead (see Session::Mount) and every spliced reply is checked: libfuse's fallback
// read()s our pipe, which shows in this thread's rchar (/proc/thread-self/io), a splice does
// not. The counters say what really happened.
#pragma once

#include <fuse_lowlevel.h>

#include <atomic>
#include <cstdint>

#include "kvfs/chunk_reader.h"

namespace kvfs::fs {

// The largest READ whose spliced reply fits a 1 MiB pipe in libfuse 3.14: its pipe must hold
// data + 16-byte header + 3 pages, rounded up to a power-of-two number of pages.
constexpr uint32_t kMaxSplicedRead = (1u << 20) - 4 * 4096;

struct ReadReplyCounters {
  std::atomic<uint64_t> spliced{0};           // data went by splice
  std::atomic<uint64_t> splice_fallbacks{0};  // we offered a pipe, libfuse copied it anyway
  std::atomic<uint64_t> copied{0};            // small replies, or splice unavailable: writev
  std::atomic<uint64_t> spliced_bytes{0};
  std::atomic<uint64_t> copied_bytes{0};  // copied + fallbacks
};

ReadReplyCounters& ReadReplies();

// Called from init: whether the connection splices replies (FUSE_CAP_SPLICE_WRITE granted).
void EnableSplicedReplies(bool enabled);

// Replies to a READ with the view's bytes (spliced when possible). Returns fuse_reply_*'s result.
int ReplyRead(fuse_req_t req, const ReadView& view);

}  // namespace kvfs::fs
