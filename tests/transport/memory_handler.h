// An in-memory RequestHandler for transport tests: a flat map of key -> bytes with versions.
#pragma once

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "kvfs/transport.h"

namespace kvfs::testing {

class MemoryHandler : public RequestHandler {
 public:
  struct Object {
    std::vector<uint8_t> bytes;
    uint64_t id = 0;
    uint64_t version = 0;
  };

  Result<wire::GetReply> Get(const wire::GetRequest& req, std::span<uint8_t> out,
                             std::vector<DataDigest>* digests) override {
    (digests ? digest_gets_ : checked_gets_).fetch_add(1);
    if (req.key == "throw") throw std::runtime_error("boom");
    WaitForConcurrency();
    std::lock_guard lock(mu_);
    auto it = objects_.find(req.key);
    if (it == objects_.end()) return Status::NotFound("no chunk " + req.key);
    const Object& o = it->second;
    if (req.version != 0 && req.version != o.version) return Status::Error(ESTALE, "version");
    wire::GetReply reply;
    reply.object_size = o.bytes.size();
    reply.version = o.version;
    if (req.offset < o.bytes.size()) {
      reply.length = std::min<uint64_t>(out.size(), o.bytes.size() - req.offset);
      std::copy_n(o.bytes.begin() + static_cast<long>(req.offset), reply.length, out.begin());
      // Damage at rest: a checked read finds it (EIO); an unchecked one sends the damaged bytes
      // with the digest of the good ones, as an engine sends a segment's stored checksum.
      // Damage in flight: the bytes change after the digest was taken.
      const bool at_rest = damaged_copy_ && reply.length > 0;
      if (at_rest && !digests) return Status::IoError("checksum mismatch (damaged copy)");
      const bool in_flight = in_flight_damage_ > 0 && digests && reply.length > 0;
      if (at_rest || in_flight) {
        digests->push_back(
            {static_cast<uint32_t>(reply.length), XXH3_64bits(out.data(), reply.length)});
        out[reply.length / 2] ^= 0x20;
        if (in_flight) --in_flight_damage_;
      }
    }
    return reply;
  }

  Result<wire::PutReply> Put(const wire::PutRequest& req, std::span<const uint8_t> data) override {
    std::lock_guard lock(mu_);
    Object& o = objects_[req.key];
    o.bytes.assign(data.begin(), data.end());
    o.id = o.id ? o.id : next_id_++;
    o.version = next_version_++;
    return wire::PutReply{o.id, o.version};
  }

  Result<StoreStats> Stats() override {
    std::lock_guard lock(mu_);
    StoreStats s;
    s.files = objects_.size();
    for (auto& [k, o] : objects_) s.logical_bytes += o.bytes.size();
    s.devices = {"memory"};
    return s;
  }

  // Makes Get calls wait until `n` of them are in flight at once (or a timeout passes), so a
  // test can prove requests really run concurrently. Records the highest concurrency seen.
  void RequireConcurrency(int n, std::chrono::milliseconds wait = std::chrono::seconds(5)) {
    want_concurrent_ = n;
    wait_ = wait;
  }
  int max_concurrent() const { return max_concurrent_; }

  // Every copy damaged at rest (or repaired), and the next `n` GETs with digests damaged on the
  // way (see Get). GETs answered with digests and GETs checked here, counted.
  void DamageCopies(bool damaged) {
    std::lock_guard lock(mu_);
    damaged_copy_ = damaged;
  }
  void DamageInFlight(int n) {
    std::lock_guard lock(mu_);
    in_flight_damage_ = n;
  }
  int digest_gets() const { return digest_gets_; }
  int checked_gets() const { return checked_gets_; }

 private:
  void WaitForConcurrency() {
    if (want_concurrent_ <= 1) return;
    std::unique_lock lock(cmu_);
    ++in_flight_;
    max_concurrent_ = std::max(max_concurrent_.load(), in_flight_);
    cv_.notify_all();
    cv_.wait_for(lock, wait_, [&] { return in_flight_ >= want_concurrent_ || released_; });
    if (in_flight_ >= want_concurrent_) released_ = true;  // let the rest of the test run free
    --in_flight_;
  }

  std::mutex mu_;
  std::map<std::string, Object> objects_;
  uint64_t next_id_ = 100, next_version_ = 1;

  std::mutex cmu_;
  std::condition_variable cv_;
  int want_concurrent_ = 0;
  std::chrono::milliseconds wait_{5000};
  int in_flight_ = 0;
  bool released_ = false;
  std::atomic<int> max_concurrent_{0};
  bool damaged_copy_ = false;  // under mu_
  int in_flight_damage_ = 0;   // under mu_
  std::atomic<int> digest_gets_{0}, checked_gets_{0};
};

}  // namespace kvfs::testing
