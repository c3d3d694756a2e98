#include "splice_reply.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

namespace kvfs::fs {
namespace {

constexpr size_t kPage = 4096;
constexpr int kPipeBytes = 1 << 20;  // fs.pipe-max-size's default: no privilege needed

std::atomic<bool> g_splice{false};

// This thread's pipe for spliced replies, and its I/O accounting (to see libfuse's fallback).
struct ThreadPipe {
  int r = -1, w = -1, io = -1;
  size_t pages = 0;
  bool unusable = false;

  ~ThreadPipe() {
    Close();
    if (io >= 0) ::close(io);
  }
  void Close() {
    if (r >= 0) ::close(r);
    if (w >= 0) ::close(w);
    r = w = -1;
  }
  bool Ready() {
    if (r >= 0) return true;
    if (unusable) return false;
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return Unusable("pipe2");
    const int size = ::fcntl(fds[0], F_SETPIPE_SZ, kPipeBytes);
    r = fds[0];
    w = fds[1];
    if (size < kPipeBytes) {
      Close();
      return Unusable("F_SETPIPE_SZ 1 MiB");
    }
    pages = static_cast<size_t>(size) / kPage;
    if (io < 0) io = ::open("/proc/thread-self/io", O_RDONLY | O_CLOEXEC);
    if (io < 0) {
      Close();
      return Unusable("open /proc/thread-self/io");
    }
    return true;
  }
  bool Unusable(const char* what) {
    spdlog::warn("read replies of this thread are copied, not spliced: {} failed: {}", what,
                 std::strerror(errno));
    unusable = true;
    return false;
  }
  // Bytes this thread passed through read(2)-like calls so far.
  long long ReadChars() const {
    char buf[512];
    const ssize_t n = ::pread(io, buf, sizeof buf - 1, 0);
    if (n <= 0) return -1;
    buf[n] = '\0';
    const char* p = std::strstr(buf, "rchar:");
    return p ? std::strtoll(p + 6, nullptr, 10) : -1;
  }
};
thread_local ThreadPipe t_pipe;

size_t PagesSpanned(const ReadView& view) {
  size_t pages = 0;
  for (const iovec& s : view.spans) {
    const auto a = reinterpret_cast<uintptr_t>(s.iov_base);
    pages += (a + s.iov_len + kPage - 1) / kPage - a / kPage;
  }
  return pages;
}

int ReplyCopied(fuse_req_t req, const ReadView& view) {
  ReadReplies().copied.fetch_add(1);
  ReadReplies().copied_bytes.fetch_add(view.size);
  return fuse_reply_iov(req, view.spans.data(), static_cast<int>(view.spans.size()));
}

// Moves the view's pages into the pipe (references, no copy). False: the pipe was reset.
bool FillPipe(const ReadView& view) {
  std::vector<iovec> rest(view.spans.begin(), view.spans.end());
  size_t i = 0;
  while (i < rest.size()) {
    const ssize_t n = ::vmsplice(t_pipe.w, rest.data() + i, rest.size() - i, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      t_pipe.Close();
      return false;
    }
    auto left = static_cast<size_t>(n);
    while (i < rest.size() && left >= rest[i].iov_len) left -= rest[i++].iov_len;
    if (left > 0) {
      rest[i].iov_base = static_cast<char*>(rest[i].iov_base) + left;
      rest[i].iov_len -= left;
    }
  }
  return true;
}

}  // namespace

ReadReplyCounters& ReadReplies() {
  static ReadReplyCounters counters;
  return counters;
}

void EnableSplicedReplies(bool enabled) { g_splice = enabled; }

int ReplyRead(fuse_req_t req, const ReadView& view) {
  if (view.size == 0) return fuse_reply_buf(req, nullptr, 0);
  // libfuse copies replies under two pages itself; a view that needs more pipe slots than the
  // pipe has cannot go in one piece.
  if (!g_splice || view.size < 2 * kPage || !t_pipe.Ready() || PagesSpanned(view) > t_pipe.pages ||
      !FillPipe(view)) {
    return ReplyCopied(req, view);
  }
  const long long before = t_pipe.ReadChars();
  fuse_bufvec buf = FUSE_BUFVEC_INIT(view.size);
  buf.buf[0].flags = FUSE_BUF_IS_FD;
  buf.buf[0].fd = t_pipe.r;
  const int rc = fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
  const long long after = t_pipe.ReadChars();
  // Whatever libfuse left behind (an error) must not prefix the next reply.
  int left = 0;
  if (::ioctl(t_pipe.r, FIONREAD, &left) != 0 || left > 0) t_pipe.Close();
  ReadReplyCounters& c = ReadReplies();
  if (before < 0 || after < 0 || after - before >= static_cast<long long>(view.size / 2)) {
    c.splice_fallbacks.fetch_add(1);
    c.copied_bytes.fetch_add(view.size);
  } else {
    c.spliced.fetch_add(1);
    c.spliced_bytes.fetch_add(view.size);
  }
  return rc;
}

}  // namespace kvfs::fs
