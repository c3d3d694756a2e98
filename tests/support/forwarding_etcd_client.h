// An etcd::Client that forwards every call to another: tests derive from it to count, slow
// down or change the answers of the calls they care about and leave the rest alone.
#pragma once

#include <atomic>
#include <functional>
#include <string>

#include "kvfs/etcd.h"

namespace kvfs::testing {

class ForwardingEtcdClient : public etcd::Client {
 public:
  explicit ForwardingEtcdClient(etcd::Client* inner) : inner_(inner) {}
  Result<etcd::RangeResponse> Range(const etcd::RangeRequest& req) override {
    return inner_->Range(req);
  }
  Result<etcd::TxnResponse> Txn(const etcd::TxnRequest& req) override { return inner_->Txn(req); }
  Result<int64_t> Put(const std::string& k, const std::string& v, int64_t lease) override {
    return inner_->Put(k, v, lease);
  }
  Result<int64_t> LeaseGrant(int64_t ttl) override { return inner_->LeaseGrant(ttl); }
  Result<int64_t> LeaseKeepAlive(int64_t lease) override { return inner_->LeaseKeepAlive(lease); }
  Status LeaseRevoke(int64_t lease) override { return inner_->LeaseRevoke(lease); }
  Status Compact(int64_t revision) override { return inner_->Compact(revision); }
  Status Watch(const etcd::WatchRequest& req,
               const std::function<bool(const etcd::WatchResponse&)>& fn,
               const std::atomic<bool>& stop) override {
    return inner_->Watch(req, fn, stop);
  }
  std::string endpoint() const override { return inner_->endpoint(); }

 protected:
  etcd::Client* inner_;
};

}  // namespace kvfs::testing
