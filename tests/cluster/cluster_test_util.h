// Helpers shared by the cluster tests: a secret, polling with a generous bound, and a
// RequestHandler that serves nothing (membership only needs PING, which the server answers).
#pragma once

#include <chrono>
#include <functional>
#include <thread>

#include "kvfs/transport.h"

namespace kvfs::cluster::testing {

inline SharedSecret TestSecret(const char* text = "cluster-test-secret-0123456789") {
  return SharedSecret::FromBytes(text).value();
}

// Polls `cond` every 10 ms until it holds or `limit` passes; returns whether it held.
inline bool WaitFor(const std::function<bool()>& cond,
                    std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return cond();
}

class NullHandler : public RequestHandler {
 public:
  Result<wire::LookupReply> Lookup(const wire::LookupRequest&) override { return Nope(); }
  Result<wire::ListReply> List(const wire::ListRequest&) override { return Nope(); }
  Result<wire::GetReply> Get(const wire::GetRequest&, std::span<uint8_t>) override {
    return Nope();
  }
  Result<wire::PutReply> Put(const wire::PutRequest&, std::span<const uint8_t>) override {
    return Nope();
  }
  Status Remove(const wire::RemoveRequest&) override { return Nope(); }
  Status Rename(const wire::RenameRequest&) override { return Nope(); }
  Result<StoreStats> Stats() override { return Nope(); }

 private:
  static Status Nope() { return Status::Error(EOPNOTSUPP, "null handler"); }
};

}  // namespace kvfs::cluster::testing
