// The etcd client against a real etcd on loopback: ranges with paging, transactions with
// compares, leases that expire, watches (with events grouped by revision, resumption and
// compaction), endpoint failover, an unreachable etcd, and decoders fed garbage.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "base64.h"
#include "etcd_json.h"
#include "etcd_server.h"
#include "kvfs/etcd.h"

namespace kvfs::etcd {
namespace {

using kvfs::testing::EtcdServer;
using namespace std::chrono_literals;

// Puts until a put works or `limit` has passed; the last put's status.
Status PutUntilItWorks(Client& client, const std::string& key, const std::string& value,
                       std::chrono::milliseconds limit) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    Status st = client.Put(key, value).status();
    if (st.ok() || std::chrono::steady_clock::now() - start >= limit) return st;
    std::this_thread::sleep_for(50ms);
  }
}

// Every client test runs against both APIs: gRPC (the default) and the JSON gateway.
class EtcdClientTest : public ::testing::TestWithParam<ClientOptions::Api> {
 protected:
  void SetUp() override {
    Status st = server_.Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
    client_ = NewClient({server_.endpoint()});
  }
  std::unique_ptr<Client> NewClient(std::vector<std::string> endpoints,
                                    std::chrono::milliseconds connect_timeout = 500ms) {
    ClientOptions o;
    o.api = GetParam();
    o.endpoints = std::move(endpoints);
    o.request_timeout = std::max<std::chrono::milliseconds>(2000ms, connect_timeout);
    o.connect_timeout = connect_timeout;
    auto c = MakeClient(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  }
  EtcdServer server_;
  std::unique_ptr<Client> client_;
};

TEST(Base64Test, RoundTripsEveryLengthAndRejectsGarbage) {
  std::string bytes;
  for (int i = 0; i < 300; ++i) {
    auto back = Base64Decode(Base64Encode(bytes));
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, bytes);
    bytes.push_back(static_cast<char>(i * 37));
  }
  EXPECT_EQ(Base64Encode("foo"), "Zm9v");
  EXPECT_EQ(Base64Encode("fo"), "Zm8=");
  for (const char* bad : {"Zm9", "Zm9v!", "Z=9v", "Zm==Zm9v", "====", "Zm9v\n"})
    EXPECT_FALSE(Base64Decode(bad).has_value()) << bad;
}

TEST(EtcdJsonTest, DecodersRefuseGarbage) {
  for (const char* bad : {"", "null", "[]", "{", "{\"kvs\": 3}", "{\"kvs\": [{\"key\": \"!!\"}]}",
                          "{\"header\": {\"revision\": \"x\"}}", "{\"count\": true}"}) {
    EXPECT_EQ(json::DecodeRange(bad).status().err(), EPROTO) << bad;
  }
  EXPECT_EQ(json::DecodeTxn("{\"succeeded\": \"yes\"}").status().err(), EPROTO);
  EXPECT_EQ(json::DecodeWatch("{\"result\": {\"events\": [{\"type\": \"EXPLODE\", \"kv\": {}}]}}")
                .status()
                .err(),
            EPROTO);
  EXPECT_EQ(json::DecodeWatch("{\"nothing\": 1}").status().err(), EPROTO);
  Status compacted = json::DecodeError(
      400, R"({"error":"etcdserver: mvcc: required revision has been compacted","code":11})");
  EXPECT_TRUE(IsCompacted(compacted));
  EXPECT_EQ(json::DecodeError(500, "not json").err(), EIO);
}

TEST(EtcdClientOptionsTest, BadOptionsAreRefused) {
  ClientOptions o;
  EXPECT_EQ(MakeClient(o).status().err(), EINVAL);
  o.endpoints = {"127.0.0.1:2379"};
  EXPECT_EQ(MakeClient(o).status().err(), EINVAL);
  o.endpoints = {"http://"};
  EXPECT_EQ(MakeClient(o).status().err(), EINVAL);
  o.endpoints = {"https://127.0.0.1:2379"};
  o.tls.cert_file = "/nonexistent/cert.pem";
  EXPECT_EQ(MakeClient(o).status().err(), EINVAL);  // a certificate without its key
  o.tls.key_file = "/nonexistent/key.pem";
  EXPECT_EQ(MakeClient(o).status().err(), ENOENT);
}

TEST_P(EtcdClientTest, PutRangeAndPaging) {
  for (int i = 0; i < 25; ++i) {
    std::string key = "p/" + std::string(1, static_cast<char>('a' + i));
    auto rev = client_->Put(key, std::string("v\0\xff", 3) + std::to_string(i));
    ASSERT_TRUE(rev.ok()) << rev.status().ToString();
  }
  RangeRequest all;
  all.key = "p/";
  all.range_end = PrefixEnd("p/");
  auto r = client_->Range(all);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->kvs.size(), 25u);
  EXPECT_EQ(r->kvs[3].value, std::string("v\0\xff", 3) + "3");  // binary values survive
  // Pages of 10 at one revision: 10, 10, 5.
  RangeRequest page = all;
  page.limit = 10;
  page.revision = r->revision;
  size_t seen = 0;
  for (;;) {
    auto p = client_->Range(page);
    ASSERT_TRUE(p.ok());
    seen += p->kvs.size();
    if (!p->more) break;
    page.key = p->kvs.back().key + '\0';
  }
  EXPECT_EQ(seen, 25u);
  RangeRequest count = all;
  count.count_only = true;
  EXPECT_EQ(client_->Range(count)->count, 25);
  RangeRequest last = all;
  last.descending = true;
  last.limit = 1;
  EXPECT_EQ(client_->Range(last)->kvs.at(0).key, "p/y");
}

TEST_P(EtcdClientTest, TransactionsCompareAndReadOnFailure) {
  auto create = [&](const std::string& key, const std::string& value) {
    TxnRequest t;
    t.compare.push_back({key, "", Compare::Target::kVersion, Compare::Op::kEqual, 0, ""});
    t.success.push_back({TxnOp::Kind::kPut, key, value, "", 0, 0});
    t.failure.push_back({TxnOp::Kind::kRange, key, "", "", 0, 0});
    return client_->Txn(t);
  };
  auto first = create("x", "one");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(first->succeeded);
  auto second = create("x", "two");
  ASSERT_TRUE(second.ok());
  EXPECT_FALSE(second->succeeded);
  ASSERT_EQ(second->ranges.size(), 1u);
  ASSERT_EQ(second->ranges[0].kvs.size(), 1u);
  EXPECT_EQ(second->ranges[0].kvs[0].value, "one");
  EXPECT_EQ(second->ranges[0].kvs[0].mod_revision, first->revision);
  // An empty range compares as version 0: "no key under this prefix".
  TxnRequest empty;
  empty.compare.push_back(
      {"dir/", PrefixEnd("dir/"), Compare::Target::kVersion, Compare::Op::kEqual, 0, ""});
  empty.success.push_back({TxnOp::Kind::kPut, "dir-ok", "1", "", 0, 0});
  EXPECT_TRUE(client_->Txn(empty)->succeeded);
  ASSERT_TRUE(client_->Put("dir/a", "1").ok());
  EXPECT_FALSE(client_->Txn(empty)->succeeded);
  // A value compare and a delete.
  TxnRequest del;
  del.compare.push_back({"x", "", Compare::Target::kValue, Compare::Op::kEqual, 0, "one"});
  del.success.push_back({TxnOp::Kind::kDelete, "x", "", "", 0, 0});
  EXPECT_TRUE(client_->Txn(del)->succeeded);
  RangeRequest gone;
  gone.key = "x";
  EXPECT_TRUE(client_->Range(gone)->kvs.empty());
}

TEST_P(EtcdClientTest, TooManyOperationsIsE2big) {
  TxnRequest t;
  for (int i = 0; i < 200; ++i)
    t.success.push_back({TxnOp::Kind::kPut, "k" + std::to_string(i), "v", "", 0, 0});
  EXPECT_EQ(client_->Txn(t).status().err(), E2BIG);
}

TEST_P(EtcdClientTest, LeasedKeysVanishWhenTheLeaseExpires) {
  auto lease = client_->LeaseGrant(2);
  ASSERT_TRUE(lease.ok()) << lease.status().ToString();
  ASSERT_TRUE(client_->Put("member", "me", *lease).ok());
  auto ttl = client_->LeaseKeepAlive(*lease);
  ASSERT_TRUE(ttl.ok()) << ttl.status().ToString();
  EXPECT_GE(*ttl, 1);
  RangeRequest r;
  r.key = "member";
  EXPECT_EQ(client_->Range(r)->kvs.at(0).lease, *lease);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!client_->Range(r)->kvs.empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(100ms);
  EXPECT_TRUE(client_->Range(r)->kvs.empty());
  EXPECT_EQ(client_->LeaseKeepAlive(*lease).status().err(), ENOENT);
  EXPECT_EQ(client_->Put("member", "me", *lease).status().err(), ENOENT);
}

TEST_P(EtcdClientTest, WatchDeliversRevisionsInOrderAndResumes) {
  auto base = client_->Put("w/start", "0");
  ASSERT_TRUE(base.ok());
  std::atomic<bool> stop{false};
  std::vector<WatchResponse> got;
  std::mutex mu;
  std::thread watcher([&] {
    WatchRequest w;
    w.key = "w/";
    w.range_end = PrefixEnd("w/");
    w.start_revision = *base + 1;
    Status st = client_->Watch(
        w,
        [&](const WatchResponse& r) {
          std::lock_guard lock(mu);
          if (!r.events.empty()) got.push_back(r);
          return true;
        },
        stop);
    EXPECT_TRUE(st.ok()) << st.ToString();
  });
  // Two keys in one transaction arrive as one response; a delete is a delete.
  TxnRequest two;
  two.success.push_back({TxnOp::Kind::kPut, "w/a", "1", "", 0, 0});
  two.success.push_back({TxnOp::Kind::kPut, "w/b", "2", "", 0, 0});
  auto t = client_->Txn(two);
  ASSERT_TRUE(t.ok());
  TxnRequest del;
  del.success.push_back({TxnOp::Kind::kDelete, "w/a", "", "", 0, 0});
  ASSERT_TRUE(client_->Txn(del).ok());
  ASSERT_TRUE(client_->Put("other", "x").ok());  // outside the range
  // etcd may put several revisions into one response: what counts is the events, in order.
  auto events = [&] {
    std::vector<Event> all;
    for (const WatchResponse& r : got) all.insert(all.end(), r.events.begin(), r.events.end());
    return all;
  };
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  for (;;) {
    {
      std::lock_guard lock(mu);
      if (events().size() >= 3 || std::chrono::steady_clock::now() > deadline) break;
    }
    std::this_thread::sleep_for(10ms);
  }
  stop = true;
  watcher.join();
  std::lock_guard lock(mu);
  const std::vector<Event> all = events();
  ASSERT_EQ(all.size(), 3u);
  // The transaction's two puts share its revision; the delete comes after, alone.
  EXPECT_EQ(all[0].kv.mod_revision, t->revision);
  EXPECT_EQ(all[0].kv.key, "w/a");
  EXPECT_EQ(all[1].kv.mod_revision, t->revision);
  EXPECT_EQ(all[1].kv.key, "w/b");
  EXPECT_EQ(all[2].type, Event::Type::kDelete);
  EXPECT_EQ(all[2].kv.key, "w/a");
  EXPECT_GT(all[2].kv.mod_revision, t->revision);
  // A revision is never split across responses.
  for (const WatchResponse& r : got) {
    const auto of_txn = std::count_if(r.events.begin(), r.events.end(), [&](const Event& e) {
      return e.kv.mod_revision == t->revision;
    });
    EXPECT_TRUE(of_txn == 0 || of_txn == 2) << of_txn;
  }
}

TEST_P(EtcdClientTest, WatchFromACompactedRevisionSaysSo) {
  auto first = client_->Put("c/a", "1");
  ASSERT_TRUE(first.ok());
  auto now = client_->Put("c/a", "2");
  ASSERT_TRUE(now.ok());
  ASSERT_TRUE(client_->Compact(*now).ok());
  std::atomic<bool> stop{false};
  WatchRequest w;
  w.key = "c/";
  w.range_end = PrefixEnd("c/");
  w.start_revision = *first;
  bool canceled = false;
  Status st = client_->Watch(
      w,
      [&](const WatchResponse& r) {
        if (r.canceled) canceled = r.compact_revision >= *now;
        return true;
      },
      stop);
  EXPECT_TRUE(IsCompacted(st)) << st.ToString();
  EXPECT_TRUE(canceled);
  RangeRequest old;
  old.key = "c/a";
  old.revision = *first;
  EXPECT_TRUE(IsCompacted(client_->Range(old).status()));
}

TEST_P(EtcdClientTest, UnreachableEtcdFailsFastAndEndpointsFailOver) {
  // A dead endpoint first: the client moves on to the live one and sticks to it.
  const std::string dead = "http://127.0.0.1:" + std::to_string(kvfs::testing::FreeLoopbackPort());
  auto c = NewClient({dead, server_.endpoint()});
  ASSERT_TRUE(c->Put("f", "1").ok());
  EXPECT_EQ(c->endpoint(), server_.endpoint());
  // Nothing answering at all: a connection error within the timeouts, not a hang.
  auto none = NewClient({dead});
  Status st = none->Put("f", "1").status();
  EXPECT_TRUE(IsUnreachable(st)) << st.ToString();
  // A frozen etcd: the request deadline.
  server_.Pause();
  st = client_->Put("f", "2").status();
  server_.Resume();
  EXPECT_EQ(st.err(), ETIMEDOUT) << st.ToString();
  EXPECT_TRUE(client_->Put("f", "3").ok());
}

TEST_P(EtcdClientTest, AnAnswerLargerThanFourMibArrivesWhole) {
  // gRPC refuses messages over 4 MiB unless told otherwise; a page of a namespace re-sync is
  // not bounded that way.
  const std::string big(1 << 20, 'b');
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(client_->Put("big/" + std::to_string(i), big).ok());
  RangeRequest all;
  all.key = "big/";
  all.range_end = PrefixEnd("big/");
  auto r = client_->Range(all);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->kvs.size(), 6u);
  for (const KeyValue& kv : r->kvs) EXPECT_EQ(kv.value, big);
}

TEST_P(EtcdClientTest, ARestartedEtcdIsFoundAgainWithinSeconds) {
  ASSERT_TRUE(client_->Put("r", "1").ok());
  server_.Kill();
  // Calls while it is down grow gRPC's reconnect backoff.
  for (int i = 0; i < 8; ++i) {
    EXPECT_TRUE(IsUnreachable(client_->Put("r", "2").status()));
    std::this_thread::sleep_for(100ms);
  }
  ASSERT_TRUE(server_.Start().ok());
  // gRPC's default reconnect backoff grows to minutes; the client's is capped at a second.
  const auto t0 = std::chrono::steady_clock::now();
  Status st = PutUntilItWorks(*client_, "r", "3", 10s);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
}

// A down etcd is a refused connection on loopback: calls say so at once instead of each
// waiting out the connect timeout (made long here so that waiting it out cannot pass), and a
// node finds etcd again by itself once it is back.
TEST_P(EtcdClientTest, CallsToADownEtcdFailAtOnceAndFindItAgain) {
  std::unique_ptr<Client> client = NewClient({server_.endpoint()}, 20s);
  ASSERT_TRUE(client->Put("d", "1").ok());
  server_.Kill();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) {
    Status st = client->Put("d", "2").status();
    EXPECT_TRUE(IsUnreachable(st)) << st.ToString();
    std::this_thread::sleep_for(50ms);
  }
  // Five calls that each waited for the connect timeout would take 100 s.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  ASSERT_TRUE(server_.Start().ok());
  // No call waits on the channel now (each fails at once): the client's own reconnecting does.
  Status st = PutUntilItWorks(*client, "d", "3", 15s);
  EXPECT_TRUE(st.ok()) << st.ToString();
}

// The first of two endpoints is down: the call goes on to the second without waiting out the
// connect timeout on the first.
TEST_P(EtcdClientTest, ADeadFirstEndpointIsPassedWithoutWaitingTheConnectTimeout) {
  const std::string dead = "http://127.0.0.1:" + std::to_string(kvfs::testing::FreeLoopbackPort());
  std::unique_ptr<Client> client = NewClient({dead, server_.endpoint()}, 20s);
  const auto t0 = std::chrono::steady_clock::now();
  Status st = client->Put("f", "1").status();
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  EXPECT_EQ(client->endpoint(), server_.endpoint());
}

TEST_P(EtcdClientTest, AQuietWatchStopsWhenAsked) {
  std::atomic<bool> stop{false};
  Status st;
  std::thread watcher([&] {
    WatchRequest w;
    w.key = "quiet/";
    w.range_end = PrefixEnd("quiet/");
    st = client_->Watch(
        w, [](const WatchResponse&) { return true; }, stop);
  });
  std::this_thread::sleep_for(300ms);
  const auto t0 = std::chrono::steady_clock::now();
  stop = true;
  watcher.join();
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

INSTANTIATE_TEST_SUITE_P(Apis, EtcdClientTest,
                         ::testing::Values(ClientOptions::Api::kGrpc,
                                           ClientOptions::Api::kJsonGateway),
                         [](const ::testing::TestParamInfo<ClientOptions::Api>& i) {
                           return i.param == ClientOptions::Api::kGrpc ? "Grpc" : "JsonGateway";
                         });

class EtcdTlsTest : public ::testing::TestWithParam<ClientOptions::Api> {};

TEST_P(EtcdTlsTest, ClientCertificatesAreRequiredAndTheServerIsVerified) {
  EtcdServer server;
  Status st = server.EnableTls();
  ASSERT_TRUE(st.ok()) << st.ToString();
  st = server.Start();
  ASSERT_TRUE(st.ok()) << st.ToString() << server.LogTail();
  auto client = [&](const TlsOptions& tls) {
    ClientOptions o;
    o.api = GetParam();
    o.endpoints = {server.endpoint()};
    o.tls = tls;
    o.request_timeout = 2000ms;
    o.connect_timeout = 1000ms;
    auto c = MakeClient(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(*c) : nullptr;
  };
  auto good = client(server.client_tls());
  ASSERT_NE(good, nullptr);
  auto rev = good->Put("t", "1");
  ASSERT_TRUE(rev.ok()) << rev.status().ToString();
  // A watch over TLS: the put arrives.
  std::atomic<bool> stop{false};
  size_t events = 0;
  WatchRequest w;
  w.key = "t";
  w.start_revision = *rev;
  st = good->Watch(
      w,
      [&](const WatchResponse& r) {
        events += r.events.size();
        return events == 0;
      },
      stop);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(events, 1u);
  // No client certificate: etcd refuses the handshake.
  TlsOptions no_cert = server.client_tls();
  no_cert.cert_file.clear();
  no_cert.key_file.clear();
  EXPECT_FALSE(client(no_cert)->Put("t", "2").ok());
  // A certificate of a CA etcd does not trust; a CA that does not verify etcd's certificate.
  EXPECT_FALSE(client(server.stranger_tls())->Put("t", "3").ok());
  TlsOptions wrong_ca = server.client_tls();
  wrong_ca.ca_file = server.stranger_tls().ca_file;
  EXPECT_FALSE(client(wrong_ca)->Put("t", "4").ok());
  RangeRequest r;
  r.key = "t";
  auto got = good->Range(r);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->kvs.at(0).value, "1");
}

INSTANTIATE_TEST_SUITE_P(Apis, EtcdTlsTest,
                         ::testing::Values(ClientOptions::Api::kGrpc,
                                           ClientOptions::Api::kJsonGateway),
                         [](const ::testing::TestParamInfo<ClientOptions::Api>& i) {
                           return i.param == ClientOptions::Api::kGrpc ? "Grpc" : "JsonGateway";
                         });

TEST(EtcdServerTest, APortTakenBeforeTheFirstStartMovesEtcdARestartKeepsIt) {
  // The harness picks a free port, then starts etcd on it; another test can take it in
  // between (CI once saw "bind: address already in use"). The first start moves on.
  EtcdServer server;
  const std::string before = server.endpoint();
  const int port = std::stoi(before.substr(before.rfind(':') + 1));
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  Status st = server.Start();
  ::close(fd);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_NE(server.endpoint(), before);
  const std::string moved = server.endpoint();
  server.Kill();
  ASSERT_TRUE(server.Start().ok());
  EXPECT_EQ(server.endpoint(), moved);  // clients know it: a restart keeps the port
  ClientOptions o;
  o.endpoints = {server.endpoint()};
  auto c = MakeClient(o);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE((*c)->Put("k", "v").ok());
}

}  // namespace
}  // namespace kvfs::etcd
