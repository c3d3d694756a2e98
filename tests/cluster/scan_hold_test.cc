// The compaction hold of a read of the whole namespace (namespace_scan_hold.cc), against a real
// etcd: the hold is there from before the read until the watch after it is up to date, then it
// goes; a quiet watch lets it go after 2 s; a release etcd refused is tried again; without a
// lease there is no hold (one would outlive its node).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "etcd_fixture.h"
#include "forwarding_etcd_client.h"
#include "namespace_log.h"
#include "record_value.h"

namespace kvfs::cluster {
namespace {

// Fails the deletes of hold keys while `fail_releases` is set, and counts the reads of records
// made while the hold key already existed.
class HoldClient : public kvfs::testing::ForwardingEtcdClient {
 public:
  HoldClient(etcd::Client* inner, const NamespaceKeys* keys)
      : ForwardingEtcdClient(inner), keys_(keys) {}
  Result<etcd::TxnResponse> Txn(const etcd::TxnRequest& req) override {
    for (const etcd::TxnOp& op : req.success) {
      if (op.kind == etcd::TxnOp::Kind::kDelete && keys_->ParseScanHold(op.key) &&
          fail_releases.load()) {
        failed_releases.fetch_add(1);
        return Status::Error(ETIMEDOUT, "etcd stalled (test)");
      }
    }
    return inner_->Txn(req);
  }
  Result<etcd::RangeResponse> Range(const etcd::RangeRequest& req) override {
    if (req.key.starts_with(keys_->RecordPrefix()) && HoldExists()) reads_held.fetch_add(1);
    return inner_->Range(req);
  }
  bool HoldExists() {
    etcd::RangeRequest r;
    r.key = keys_->ScanHold(1);
    auto got = inner_->Range(r);
    return got.ok() && !got->kvs.empty();
  }
  std::atomic<bool> fail_releases{false};
  std::atomic<int> failed_releases{0};
  std::atomic<int> reads_held{0};

 private:
  const NamespaceKeys* keys_;
};

class ScanHoldTest : public kvfs::testing::EtcdFixture {
 protected:
  void SetUp() override {
    EtcdFixture::SetUp();
    if (HasFatalFailure()) return;
    hold_client_ = std::make_unique<HoldClient>(client_.get(), &keys_);
    auto lease = client_->LeaseGrant(60);
    ASSERT_TRUE(lease.ok()) << lease.status().ToString();
    lease_ = *lease;
    // Some records, so the read has something to read.
    for (ObjectId id = 1; id <= 3; ++id) PutRecord(id);
  }
  void TearDown() override {
    if (log_) log_->Stop();
  }
  // Load (the read) without starting the watch.
  void LoadLog(bool with_lease) {
    NamespaceLogHooks hooks;
    hooks.apply = [](std::vector<ObjectRecord>&&, std::vector<ObjectId>&&) {};
    hooks.resync = [](const std::vector<ObjectId>&, int64_t) {};
    const int64_t lease = with_lease ? lease_ : 0;
    hooks.lease = [lease] { return lease; };
    NamespaceLogOptions lo;
    lo.self = 1;
    lo.page = 1;  // a read of several pages
    log_ = std::make_unique<NamespaceLog>(hold_client_.get(), &keys_, lo, std::move(hooks));
    Status st = log_->Load([](ObjectRecord&&) {});
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  // A change of another node, which the watch delivers.
  void PutRecord(ObjectId id) {
    ObjectRecord r;
    r.id = (uint64_t{2} << 48) | id;  // node 2's id space (namespace_keys.h)
    r.parent = kRootId;
    r.name = "f" + std::to_string(id);
    r.type = ObjectType::kFile;
    auto put = client_->Put(keys_.Record(r.id), EncodeRecordValue(r, 1));
    ASSERT_TRUE(put.ok()) << put.status().ToString();
  }
  bool HoldGoneWithin(std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (hold_client_->HoldExists()) {
      if (std::chrono::steady_clock::now() > end) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return true;
  }

  NamespaceKeys keys_{"/kvfs/"};
  std::unique_ptr<HoldClient> hold_client_;
  std::unique_ptr<NamespaceLog> log_;
  int64_t lease_ = 0;
};

TEST_F(ScanHoldTest, TheHoldCoversTheReadAndGoesOnceTheWatchDelivers) {
  LoadLog(true);
  EXPECT_GE(hold_client_->reads_held.load(), 3) << "every page read under the hold";
  EXPECT_TRUE(hold_client_->HoldExists()) << "the read is over, but no watch runs yet";
  log_->Start();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(hold_client_->HoldExists()) << "nothing delivered, and not 2 s yet";
  PutRecord(10);
  EXPECT_TRUE(HoldGoneWithin(std::chrono::seconds(1)));
}

TEST_F(ScanHoldTest, AQuietWatchLetsTheHoldGoAfterTwoSeconds) {
  LoadLog(true);
  log_->Start();
  log_->ReleaseScanHold();  // what the house thread calls once a second
  EXPECT_TRUE(hold_client_->HoldExists());
  std::this_thread::sleep_for(std::chrono::milliseconds(2200));
  log_->ReleaseScanHold();
  EXPECT_FALSE(hold_client_->HoldExists());
}

TEST_F(ScanHoldTest, AReleaseEtcdRefusedIsTriedAgain) {
  LoadLog(true);
  hold_client_->fail_releases = true;
  log_->Start();
  PutRecord(10);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (hold_client_->failed_releases.load() == 0 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GE(hold_client_->failed_releases.load(), 1);
  log_->ReleaseScanHold();
  EXPECT_TRUE(hold_client_->HoldExists()) << "etcd still refuses";
  hold_client_->fail_releases = false;
  log_->ReleaseScanHold();
  EXPECT_FALSE(hold_client_->HoldExists());
}

TEST_F(ScanHoldTest, WithoutALeaseThereIsNoHold) {
  LoadLog(false);
  EXPECT_EQ(hold_client_->reads_held.load(), 0);
  EXPECT_FALSE(hold_client_->HoldExists());
}

}  // namespace
}  // namespace kvfs::cluster
