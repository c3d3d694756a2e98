// ScanRecords against a real etcd: every record under the prefix exactly once (dense and sparse
// id spaces of several nodes, the largest id, keys that are not ids at all), one revision for
// the whole scan, and a cost linear in the namespace: the keys etcd visits (the `count` of
// every range read) stay within a few times the records, where paging one range by its last
// key visits about n^2 / (2 page) (etcd 3.4 collects a range's every key before its limit).
#include "record_scan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>

#include "etcd_fixture.h"
#include "forwarding_etcd_client.h"
#include "record_value.h"

namespace kvfs::cluster {
namespace {

// Forwards to a real client and adds up how many keys each range read covered.
class CountingClient : public kvfs::testing::ForwardingEtcdClient {
 public:
  using ForwardingEtcdClient::ForwardingEtcdClient;
  Result<etcd::RangeResponse> Range(const etcd::RangeRequest& req) override {
    auto got = inner_->Range(req);
    if (got.ok()) keys_visited += static_cast<uint64_t>(got->count);
    if (got.ok() && tamper) tamper(req, *got);
    return got;
  }
  // Changes answers before the scan sees them (a broken or hostile etcd).
  std::function<void(const etcd::RangeRequest&, etcd::RangeResponse&)> tamper;
  uint64_t keys_visited = 0;
};

class RecordScanTest : public kvfs::testing::EtcdFixture {
 protected:
  static std::string Value(ObjectId id) {
    ObjectRecord r;
    r.id = id;
    r.parent = kRootId;
    r.name = "f" + Hex16(id);
    r.type = ObjectType::kFile;
    r.mode = 0644;
    return EncodeRecordValue(r, 1);
  }

  // Puts key -> value pairs, 100 per transaction.
  void PutAll(const std::vector<std::pair<std::string, std::string>>& kvs) {
    for (size_t i = 0; i < kvs.size(); i += 100) {
      etcd::TxnRequest txn;
      for (size_t j = i; j < std::min(kvs.size(), i + 100); ++j) {
        etcd::TxnOp op;
        op.key = kvs[j].first;
        op.value = kvs[j].second;
        txn.success.push_back(op);
      }
      auto r = client_->Txn(txn);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
    }
  }

  NamespaceKeys keys_{"/kvfs/"};
};

TEST_F(RecordScanTest, EveryRecordOnceAtLinearCost) {
  std::vector<ObjectId> ids;
  for (uint64_t i = 2; i < 3002; ++i) ids.push_back((uint64_t{1} << 48) | i);            // dense
  for (uint64_t i = 0; i < 300; ++i) ids.push_back((uint64_t{7} << 48) | (i * 100003));  // sparse
  ids.push_back((uint64_t{0xffff} << 48) | 5);
  ids.push_back(~uint64_t{0});  // the largest id there is
  std::vector<std::pair<std::string, std::string>> kvs;
  for (ObjectId id : ids) kvs.emplace_back(keys_.Record(id), Value(id));
  // Keys kvfs never writes, before, between and after the ids: garbage values are skipped,
  // a decodable value under an odd key is still read (nothing under the prefix is missed).
  kvs.emplace_back(keys_.RecordPrefix() + "!", "garbage");
  kvs.emplace_back(keys_.Record((uint64_t{1} << 48) | 7) + "zz", "garbage");
  kvs.emplace_back(keys_.RecordPrefix() + "zzzz", "garbage");
  kvs.emplace_back(keys_.RecordPrefix() + "g", Value(42));
  ids.push_back(42);
  PutAll(kvs);
  // Neighbours under other prefixes are not records.
  ASSERT_TRUE(client_->Put("/kvfs/h", Value(43)).ok());
  ASSERT_TRUE(client_->Put(keys_.MemberPrefix() + "00001", "{}").ok());

  for (size_t page : {1u, 7u, 50u, 1000u}) {
    SCOPED_TRACE("page " + std::to_string(page));
    CountingClient counting(client_.get());
    std::map<ObjectId, int> seen;
    ScanStats stats;
    auto rev = ScanRecords(
        &counting, keys_, page, [&](ObjectRecord&& r) { ++seen[r.id]; }, &stats);
    ASSERT_TRUE(rev.ok()) << rev.status().ToString();
    EXPECT_GT(*rev, 0);
    EXPECT_EQ(seen.size(), ids.size());
    for (ObjectId id : ids) EXPECT_EQ(seen[id], 1) << Hex16(id);
    EXPECT_EQ(stats.records, ids.size());
    EXPECT_EQ(stats.skipped, 3u);
    // Linear: paging one range would visit ~n^2 / (2 page) keys (109,000 at page 50).
    const uint64_t n = kvs.size();
    EXPECT_LE(counting.keys_visited, 12 * n + 64 * page) << stats.requests << " reads";
    if (page == 50) {
      EXPECT_LE(stats.requests, 4 * n / page + 200);
    }
  }
}

TEST_F(RecordScanTest, ReadsOneRevisionThroughout) {
  std::vector<std::pair<std::string, std::string>> kvs;
  for (uint64_t i = 2; i < 500; ++i)
    kvs.emplace_back(keys_.Record((uint64_t{1} << 48) | i), Value((uint64_t{1} << 48) | i));
  PutAll(kvs);
  const ObjectId late_low = (uint64_t{1} << 48) | 1, late_high = (uint64_t{9} << 48) | 1;
  const ObjectId removed = (uint64_t{1} << 48) | 499;
  size_t seen = 0;
  bool changed = false, late_seen = false, removed_seen = false;
  auto rev = ScanRecords(client_.get(), keys_, 20, [&](ObjectRecord&& r) {
    ++seen;
    late_seen |= r.id == late_low || r.id == late_high;
    removed_seen |= r.id == removed;
    if (!changed) {  // after the first page: a new record behind and ahead, one deleted ahead
      changed = true;
      ASSERT_TRUE(client_->Put(keys_.Record(late_low), Value(late_low)).ok());
      ASSERT_TRUE(client_->Put(keys_.Record(late_high), Value(late_high)).ok());
      etcd::TxnRequest del;
      etcd::TxnOp op;
      op.kind = etcd::TxnOp::Kind::kDelete;
      op.key = keys_.Record(removed);
      del.success.push_back(op);
      ASSERT_TRUE(client_->Txn(del).ok());
    }
  });
  ASSERT_TRUE(rev.ok()) << rev.status().ToString();
  EXPECT_EQ(seen, 498u);
  EXPECT_FALSE(late_seen);
  EXPECT_TRUE(removed_seen);
}

// An answer with keys outside the range asked for (the same page again and again, or keys
// from before the cursor) is an error, not an endless scan.
TEST_F(RecordScanTest, AnAnswerOutsideTheRangeAskedForIsAnError) {
  std::vector<std::pair<std::string, std::string>> kvs;
  for (uint64_t i = 2; i < 50; ++i)
    kvs.emplace_back(keys_.Record((uint64_t{1} << 48) | i), Value((uint64_t{1} << 48) | i));
  PutAll(kvs);
  CountingClient hostile(client_.get());
  etcd::RangeResponse first_page;
  hostile.tamper = [&](const etcd::RangeRequest&, etcd::RangeResponse& got) {
    if (first_page.kvs.empty() && !got.kvs.empty()) first_page = got;
    if (!first_page.kvs.empty()) got = first_page;  // the same page forever, "more" set
  };
  size_t delivered = 0;
  auto rev = ScanRecords(&hostile, keys_, 10, [&](ObjectRecord&&) { ++delivered; });
  ASSERT_FALSE(rev.ok());
  EXPECT_EQ(rev.status().err(), EPROTO) << rev.status().ToString();
  EXPECT_LE(delivered, 10u);  // the first page at most; the repeat is refused, not delivered

  CountingClient wide(client_.get());
  wide.tamper = [&](const etcd::RangeRequest& req, etcd::RangeResponse& got) {
    etcd::KeyValue beyond;
    beyond.key = req.range_end.empty() ? req.key + "~" : req.range_end;  // not below range_end
    beyond.value = Value(3);
    got.kvs.push_back(beyond);
  };
  rev = ScanRecords(&wide, keys_, 10, [](ObjectRecord&&) {});
  ASSERT_FALSE(rev.ok());
  EXPECT_EQ(rev.status().err(), EPROTO);
}

TEST_F(RecordScanTest, UnreachableEtcdIsAnError) {
  server_.Stop();
  auto rev = ScanRecords(client_.get(), keys_, 100, [](ObjectRecord&&) {});
  ASSERT_FALSE(rev.ok());
  EXPECT_TRUE(etcd::IsUnreachable(rev.status())) << rev.status().ToString();
}

}  // namespace
}  // namespace kvfs::cluster
