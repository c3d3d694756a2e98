#include "record_scan.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <limits>
#include <mutex>
#include <system_error>
#include <thread>

#include "record_value.h"

namespace kvfs::cluster {
namespace {

constexpr uint64_t kMaxId = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kFirstWidth = uint64_t{1} << 16;
constexpr size_t kPagesAhead = 2;

// The sequence of range reads that covers the record prefix: windows of ids sized to hold
// about a page each, paged by their last key when one holds more.
class Windows {
 public:
  Windows(const NamespaceKeys& keys, size_t page)
      : keys_(keys), page_(page), prefix_end_(etcd::PrefixEnd(keys.RecordPrefix())) {
    // The first window starts at the prefix itself, so no key under it is missed, whatever
    // it looks like.
    cursor_ = keys.RecordPrefix();
  }

  etcd::RangeRequest Request(int64_t revision) {
    last_ = width_ > kMaxId - next_id_;  // this window runs to the end of the prefix
    if (window_end_.empty()) window_end_ = last_ ? prefix_end_ : keys_.Record(next_id_ + width_);
    etcd::RangeRequest r;
    r.key = cursor_;
    r.range_end = window_end_;
    r.limit = static_cast<int64_t>(page_);
    r.revision = revision;
    return r;
  }

  enum class Step { kNext, kEnd, kInvalid };
  // Moves past what `got` (the answer to the last Request) holds. kInvalid when it is no
  // answer to that request (a key outside the range asked for): going on from it could read
  // the same page forever.
  Step Advance(const etcd::RangeResponse& got) {
    const uint64_t held = static_cast<uint64_t>(std::max<int64_t>(got.count, 0));
    if (!got.kvs.empty() && (got.kvs.front().key < cursor_ || got.kvs.back().key < cursor_ ||
                             got.kvs.back().key >= window_end_)) {
      return Step::kInvalid;
    }
    if (got.more && !got.kvs.empty()) {
      // The window held more than a page: go on after the last key, in a window sized from
      // how many keys this one held. A last key that is not an id (nothing kvfs wrote) gives
      // no position to size from: the same window goes on.
      cursor_ = got.kvs.back().key + '\0';
      auto id = keys_.ParseRecord(got.kvs.back().key);
      if (id && *id >= next_id_ && *id < kMaxId) {
        next_id_ = *id + 1;
        width_ = NextWidth(held);
        window_end_.clear();
      }
      return Step::kNext;
    }
    if (last_) return Step::kEnd;
    next_id_ += width_;
    cursor_ = window_end_;
    window_end_.clear();
    width_ = NextWidth(held);
    return Step::kNext;
  }

 private:
  // About a page of keys at the density just seen, growing at most 4x a step (the empty
  // stretches between nodes' id spaces take a few dozen cheap reads), never below one id.
  uint64_t NextWidth(uint64_t held) const {
    using U128 = unsigned __int128;
    const U128 grown = static_cast<U128>(width_) * 4;
    U128 next = grown;
    if (held > 0) next = std::min<U128>(grown, static_cast<U128>(width_) * page_ / held);
    return static_cast<uint64_t>(std::clamp<U128>(next, 1, kMaxId));
  }

  const NamespaceKeys& keys_;
  const size_t page_;
  const std::string prefix_end_;
  std::string cursor_;    // the next key to read
  uint64_t next_id_ = 0;  // the smallest id not read yet
  uint64_t width_ = kFirstWidth;
  std::string window_end_;  // empty: size a new window from next_id_ and width_
  bool last_ = false;
};

Status NotAnAnswer() {
  return Status::Error(EPROTO, "etcd answered a range read with keys outside the range asked for");
}

// Pages handed from the reading thread to the decoding one.
struct PageQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<etcd::RangeResponse> pages;
  bool done = false;
  Status error;
};

}  // namespace

Result<int64_t> ScanRecords(etcd::Client* etcd, const NamespaceKeys& keys, size_t page,
                            const std::function<void(ObjectRecord&&)>& fn, ScanStats* stats) {
  ScanStats local;
  ScanStats& st = stats ? *stats : local;
  Windows windows(keys, std::max<size_t>(page, 1));
  // The first read fixes the revision every further one reads at (one consistent view).
  KVFS_ASSIGN_OR_RETURN(etcd::RangeResponse first, etcd->Range(windows.Request(0)));
  ++st.requests;
  const int64_t revision = first.revision;
  const Windows::Step step = windows.Advance(first);
  if (step == Windows::Step::kInvalid) return NotAnAnswer();
  const bool more = step == Windows::Step::kNext;

  // Reading runs a page or two ahead of decoding: the next read depends only on the keys of
  // the last one, so etcd serves it while this thread decodes (and the caller builds its tree).
  PageQueue q;
  q.pages.push_back(std::move(first));
  q.done = !more;
  auto read_rest = [&] {
    Status error;
    for (bool go = true; go;) {
      auto got = etcd->Range(windows.Request(revision));
      if (!got.ok()) {
        error = got.status();
        break;
      }
      const Windows::Step step = windows.Advance(*got);
      if (step == Windows::Step::kInvalid) {
        error = NotAnAnswer();
        break;
      }
      go = step == Windows::Step::kNext;
      std::unique_lock lock(q.mu);
      ++st.requests;
      q.cv.wait(lock, [&] { return q.pages.size() < kPagesAhead; });
      q.pages.push_back(std::move(*got));
      q.cv.notify_all();
    }
    std::lock_guard lock(q.mu);
    q.done = true;
    q.error = error;
    q.cv.notify_all();
  };
  std::thread reader;
  if (more) {
    try {
      reader = std::thread(read_rest);
    } catch (const std::system_error&) {
      return Status::Error(EAGAIN, "no thread to read the namespace with");
    }
  }
  for (;;) {
    etcd::RangeResponse got;
    {
      std::unique_lock lock(q.mu);
      q.cv.wait(lock, [&] { return !q.pages.empty() || q.done; });
      if (q.pages.empty()) break;
      got = std::move(q.pages.front());
      q.pages.pop_front();
      q.cv.notify_all();
    }
    for (etcd::KeyValue& kv : got.kvs) {
      auto v = DecodeRecordValue(kv.value, static_cast<uint64_t>(kv.mod_revision));
      if (!v.ok()) {
        if (st.skipped++ < 10)
          spdlog::error("cluster: skipping key {}: {}", kv.key, v.status().ToString());
        continue;
      }
      ++st.records;
      fn(std::move(v->record));
    }
  }
  if (reader.joinable()) reader.join();
  KVFS_RETURN_IF_ERROR(q.error);
  if (st.skipped > 0)
    spdlog::error("cluster: {} namespace keys did not decode and were skipped", st.skipped);
  return revision;
}

}  // namespace kvfs::cluster
