// Three (or four) ClusterStores in one process, each over its own MemoryStore and serving on a
// 127.0.0.1 ephemeral port: replication of data and namespace, failover, refusal of a wrong
// secret, restart.
#include "cluster_store.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>

#include "cluster_test_util.h"
#include "kvfs/local_engine.h"
#include "memory_store.h"
#include "temp_dir.h"

namespace kvfs::cluster {
namespace {

using namespace std::chrono_literals;
using testing::TestSecret;
using testing::WaitFor;

class RecordingListener : public ClusterListener {
 public:
  void OnPut(const ObjectRecord& r) override {
    std::lock_guard lock(mu_);
    puts_.insert(r.name);
  }
  void OnRemove(ObjectId id) override {
    std::lock_guard lock(mu_);
    removes_.insert(id);
  }
  bool SawPut(const std::string& name) {
    std::lock_guard lock(mu_);
    return puts_.count(name) != 0;
  }
  bool SawRemove(ObjectId id) {
    std::lock_guard lock(mu_);
    return removes_.count(id) != 0;
  }

 private:
  std::mutex mu_;
  std::set<std::string> puts_;
  std::set<ObjectId> removes_;
};

struct Node {
  NodeId id = 0;
  std::unique_ptr<ChunkStore> local = std::make_unique<MemoryStore>();
  std::unique_ptr<ClusterStore> store;
  uint16_t port = 0;
  RecordingListener listener;
};

std::string Content(int i, size_t size) {
  std::string s(size, '\0');
  for (size_t j = 0; j < size; ++j)
    s[j] = static_cast<char>((j * 131 + static_cast<size_t>(i) * 7) & 0xff);
  return s;
}

class ClusterStoreTest : public ::testing::Test {
 protected:
  void TearDown() override {
    for (auto& n : nodes_) n->store.reset();
  }

  ClusterOptions Options(NodeId id) const {
    ClusterOptions o;
    o.self = id;
    o.replicas = replicas_;
    o.secret = TestSecret();
    o.request_timeout = 500ms;
    o.ping_interval = 100ms;
    o.ping_timeout = 300ms;
    o.misses_to_down = 3;
    return o;
  }

  void StartCluster(int n, size_t replicas) {
    replicas_ = replicas;
    for (int i = 0; i < n; ++i) {
      auto node = std::make_unique<Node>();
      node->id = static_cast<NodeId>(i + 1);
      nodes_.push_back(std::move(node));
      ASSERT_TRUE(Open(i).ok());
    }
    for (int i = 0; i < n; ++i) ASSERT_TRUE(node(i).store->Join(NodeList()).ok());
  }

  // Opens node i's ClusterStore over its (kept) MemoryStore and serves on its port.
  Status Open(int i) {
    Node& n = node(i);
    KVFS_ASSIGN_OR_RETURN(n.store, ClusterStore::Open(n.local.get(), Options(n.id)));
    n.store->SetClusterListener(&n.listener);
    KVFS_ASSIGN_OR_RETURN(n.port, n.store->Listen("127.0.0.1", n.port));
    return Status::Ok();
  }

  void Stop(int i) { node(i).store.reset(); }

  Status Restart(int i) {
    KVFS_RETURN_IF_ERROR(Open(i));
    return node(i).store->Join(NodeList());
  }

  std::vector<NodeInfo> NodeList() const {
    std::vector<NodeInfo> out;
    for (const auto& n : nodes_) out.push_back({n->id, {"127.0.0.1", n->port}});
    return out;
  }

  Node& node(int i) { return *nodes_[static_cast<size_t>(i)]; }
  ClusterStore& store(int i) { return *node(i).store; }

  // Publishes `data` as /name on node i, as the fs would: writer, Finish, Apply.
  Result<ObjectId> Publish(int i, const std::string& name, const std::string& data) {
    ClusterStore& s = store(i);
    KVFS_ASSIGN_OR_RETURN(std::unique_ptr<ChunkWriter> w, s.NewWriter(nullptr));
    KVFS_RETURN_IF_ERROR(w->Write(0, data.data(), data.size()));
    KVFS_ASSIGN_OR_RETURN(LayoutRef layout, w->Finish());
    ObjectRecord rec;
    rec.id = s.NewId();
    rec.parent = kRootId;
    rec.name = name;
    rec.type = ObjectType::kFile;
    rec.mode = 0644;
    rec.mtime = {1700000000, 0};
    rec.layout = layout;
    MetaBatch batch;
    batch.puts.push_back(rec);
    KVFS_RETURN_IF_ERROR(s.Apply(batch));
    return rec.id;
  }

  static std::optional<ObjectRecord> Find(ClusterStore& s, const std::string& name) {
    for (ObjectRecord& r : s.Records()) {
      if (r.name == name) return r;
    }
    return std::nullopt;
  }

  bool Visible(int i, const std::string& name) { return Find(store(i), name).has_value(); }

  Result<std::string> ReadAll(int i, const std::string& name) {
    auto rec = Find(store(i), name);
    if (!rec) return Status::NotFound(name);
    std::string out(rec->size(), '\0');
    size_t done = 0;
    while (done < out.size()) {
      KVFS_ASSIGN_OR_RETURN(size_t n,
                            store(i).Read(rec->layout, done, out.data() + done, out.size() - done));
      if (n == 0) return Status::IoError("short read");
      done += n;
    }
    return out;
  }

  static const ClusterLayout& LayoutOf(const ObjectRecord& r) {
    return *AsClusterLayout(r.layout.get());
  }

  uint64_t TotalPutsSent() {
    uint64_t n = 0;
    for (auto& nd : nodes_) {
      if (nd->store) n += nd->store->counters().puts_sent;
    }
    return n;
  }

  size_t replicas_ = 2;
  std::vector<std::unique_ptr<Node>> nodes_;
};

TEST_F(ClusterStoreTest, PublishOnOneNodeReadsByteExactOnAnother) {
  StartCluster(3, 2);
  const std::string data = Content(1, 3 << 20);
  ASSERT_TRUE(Publish(0, "kv-0001.bin", data).ok());
  for (int i = 1; i < 3; ++i) {
    ASSERT_TRUE(WaitFor([&] { return Visible(i, "kv-0001.bin"); })) << "node " << i + 1;
    EXPECT_TRUE(node(i).listener.SawPut("kv-0001.bin"));
  }
  auto rec = Find(store(2), "kv-0001.bin");
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->size(), data.size());
  EXPECT_EQ(rec->id >> 48, 1u) << "object ids carry the origin node in the high 16 bits";
  const ClusterLayout& cl = LayoutOf(*rec);
  // The ranked replicas hold the chunk; the writer keeps its copy too.
  std::vector<NodeId> all{1, 2, 3};
  auto ranked = RendezvousPlacement::Rank(cl.chunk_key, all);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_TRUE(store(ranked[k] - 1).HoldsChunk(cl.chunk_key)) << "node " << ranked[k];
  }
  EXPECT_TRUE(store(0).HoldsChunk(cl.chunk_key));
  for (int i = 0; i < 3; ++i) {
    auto got = ReadAll(i, "kv-0001.bin");
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    EXPECT_TRUE(*got == data) << "node " << i + 1;
  }
}

TEST_F(ClusterStoreTest, RenameAndUnlinkAreNamespaceOnly) {
  StartCluster(3, 1);
  const std::string data = Content(2, 100000);
  auto id = Publish(0, "a.bin", data);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(WaitFor([&] { return Visible(1, "a.bin") && Visible(2, "a.bin"); }));
  const uint64_t puts_before = TotalPutsSent();
  const std::string key = LayoutOf(*Find(store(1), "a.bin")).chunk_key;

  // Rename on node 2: the same record (same layout, so the same chunk key) under a new name.
  ObjectRecord moved = *Find(store(1), "a.bin");
  moved.name = "b.bin";
  MetaBatch rename;
  rename.puts.push_back(moved);
  ASSERT_TRUE(store(1).Apply(rename).ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(WaitFor([&] { return Visible(i, "b.bin") && !Visible(i, "a.bin"); }))
        << "node " << i + 1;
  }
  EXPECT_EQ(TotalPutsSent(), puts_before) << "a rename copied data";
  EXPECT_EQ(LayoutOf(*Find(store(2), "b.bin")).chunk_key, key);
  auto got = ReadAll(2, "b.bin");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == data);

  // Unlink on node 3: gone everywhere, reported, and the copies are dropped.
  MetaBatch unlink;
  unlink.removes.push_back(*id);
  ASSERT_TRUE(store(2).Apply(unlink).ok());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(WaitFor([&] { return !Visible(i, "b.bin"); })) << "node " << i + 1;
    ASSERT_TRUE(WaitFor([&] { return !store(i).HoldsChunk(key); })) << "node " << i + 1;
  }
  EXPECT_TRUE(node(0).listener.SawRemove(*id));
  EXPECT_TRUE(node(1).listener.SawRemove(*id));
  EXPECT_EQ(TotalPutsSent(), puts_before);
}

TEST_F(ClusterStoreTest, TwoReplicasSurviveTheWritersLoss) {
  StartCluster(3, 2);
  const int kFiles = 12;
  for (int f = 0; f < kFiles; ++f) {
    ASSERT_TRUE(Publish(0, "f" + std::to_string(f), Content(f, 50000 + f)).ok());
  }
  ASSERT_TRUE(WaitFor([&] { return Visible(2, "f" + std::to_string(kFiles - 1)); }));
  Stop(0);  // the writer, which holds a copy of everything
  for (int f = 0; f < kFiles; ++f) {
    const std::string name = "f" + std::to_string(f);
    auto got = ReadAll(2, name);
    ASSERT_TRUE(got.ok()) << name << ": " << got.status().ToString();
    EXPECT_TRUE(*got == Content(f, 50000 + f)) << name;
  }
  // Some chunk was not on node 3 and came from node 2 (12 keys: all on node 3 has odds 1/4096).
  EXPECT_GT(store(2).counters().gets_sent, 0u);
}

// A listening socket that never accepts: connections hang in the backlog, so a peer "there"
// costs a full timeout rather than a quick refusal.
class SilentListener {
 public:
  explicit SilentListener(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 && ::listen(fd_, 16) == 0;
  }
  ~SilentListener() { ::close(fd_); }
  bool ok() const { return ok_; }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

TEST_F(ClusterStoreTest, OneReplicaWithItsHolderGoneFailsWithEioNotAHang) {
  StartCluster(3, 1);
  // Publish on node 1 until a chunk ranks node 2 first: its copies are then on nodes 2 and 1.
  std::string name;
  for (int f = 0; f < 64 && name.empty(); ++f) {
    const std::string n = "r" + std::to_string(f);
    ASSERT_TRUE(Publish(0, n, Content(f, 4096)).ok());
    const ClusterLayout& cl = LayoutOf(*Find(store(0), n));
    if (cl.replicas.front() == 2) name = n;
  }
  ASSERT_FALSE(name.empty());
  ASSERT_TRUE(WaitFor([&] { return Visible(2, name); }));
  const uint16_t port2 = node(1).port;
  Stop(0);
  Stop(1);
  SilentListener silent(port2);  // node 2 "hangs" instead of refusing
  ASSERT_TRUE(silent.ok());
  const auto start = std::chrono::steady_clock::now();
  auto got = ReadAll(2, name);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().err(), EIO) << got.status().ToString();
  // Two replicas, 500 ms deadline each: far under this bound, and never a hang.
  EXPECT_LT(elapsed, 10s);
}

TEST_F(ClusterStoreTest, ReadOfAChunkUnlinkedElsewhereIsEnoent) {
  StartCluster(3, 1);
  // A chunk that node 3 does not hold: ranked on node 1 or 2, written by node 1.
  std::string name;
  for (int f = 0; f < 64 && name.empty(); ++f) {
    const std::string n = "u" + std::to_string(f);
    ASSERT_TRUE(Publish(0, n, Content(f, 8192)).ok());
    if (!store(2).HoldsChunk(LayoutOf(*Find(store(0), n)).chunk_key)) name = n;
  }
  ASSERT_FALSE(name.empty());
  ASSERT_TRUE(WaitFor([&] { return Visible(2, name); }));
  const ObjectRecord held = *Find(store(2), name);  // as an open file keeps its layout
  MetaBatch unlink;
  unlink.removes.push_back(held.id);
  ASSERT_TRUE(store(0).Apply(unlink).ok());
  ASSERT_TRUE(WaitFor([&] { return !Visible(2, name); }));
  std::string buf(100, '\0');
  auto r = store(2).Read(held.layout, 0, buf.data(), buf.size());
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().err(), ENOENT) << r.status().ToString();
}

TEST_F(ClusterStoreTest, WrongSecretIsRefused) {
  StartCluster(3, 1);
  // A direct client with the wrong secret cannot even ping.
  ClientOptions co;
  co.secret = TestSecret("not-the-cluster-secret-987654321");
  co.connect_timeout = 1s;
  co.request_timeout = 1s;
  auto client = MakePeerClient({"127.0.0.1", node(0).port}, co);
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->Ping().err(), EACCES);

  // A whole node with the wrong secret: its publish reaches nobody.
  auto intruder_local = std::make_unique<MemoryStore>();
  ClusterOptions o = Options(4);
  o.secret = TestSecret("not-the-cluster-secret-987654321");
  auto intruder = ClusterStore::Open(intruder_local.get(), o);
  ASSERT_TRUE(intruder.ok());
  ASSERT_TRUE((*intruder)->Listen("127.0.0.1", 0).ok());
  auto list = NodeList();
  list.push_back({4, {"127.0.0.1", 1}});
  ASSERT_TRUE((*intruder)->Join(list).ok());
  auto w = (*intruder)->NewWriter(nullptr);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write(0, "evil", 4).ok());
  auto layout = (*w)->Finish();
  ASSERT_TRUE(layout.ok());
  ObjectRecord rec;
  rec.id = (*intruder)->NewId();
  rec.parent = kRootId;
  rec.name = "intruder.bin";
  rec.layout = *layout;
  MetaBatch batch;
  batch.puts.push_back(rec);
  ASSERT_TRUE((*intruder)->Apply(batch).ok());  // kept locally; every PUT and push is refused
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(Visible(i, "intruder.bin"));
    EXPECT_EQ(store(i).counters().puts_received, 0u);
    EXPECT_EQ(store(i).counters().pushes_received, 0u);
  }
  (*intruder).reset();
}

TEST_F(ClusterStoreTest, RestartedNodeCatchesUpAndServesItsChunks) {
  StartCluster(3, 1);
  std::string name;
  for (int f = 0; f < 64 && name.empty(); ++f) {
    const std::string n = "s" + std::to_string(f);
    ASSERT_TRUE(Publish(0, n, Content(f, 20000)).ok());
    if (LayoutOf(*Find(store(0), n)).replicas.front() == 2) name = n;
  }
  ASSERT_FALSE(name.empty());
  ASSERT_TRUE(WaitFor([&] { return Visible(1, name); }));

  Stop(1);
  // Published while node 2 is down: it misses the push.
  ASSERT_TRUE(Publish(0, "while-down.bin", Content(99, 777)).ok());
  ASSERT_TRUE(Restart(1).ok());
  // The namespace is back from the peers (the MemoryStore kept only chunks).
  EXPECT_TRUE(Visible(1, name));
  EXPECT_TRUE(Visible(1, "while-down.bin"));

  // With the writer gone, node 3 can read the chunk only from the restarted node 2.
  Stop(0);
  auto got = ReadAll(2, name);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == Content(std::stoi(name.substr(1)), 20000));
  EXPECT_GT(store(1).counters().gets_served, 0u);
}

EngineOptions EngineAt(const std::string& dir) {
  EngineOptions o;
  o.data_dir = dir;
  o.capacity = 64u << 20;
  o.segment_size = 1u << 20;
  return o;
}

TEST_F(ClusterStoreTest, LocalEngineNodeKeepsItsChunksAcrossARealRestart) {
  kvfs::testing::TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  replicas_ = 1;
  for (int i = 0; i < 3; ++i) {
    auto n = std::make_unique<Node>();
    n->id = static_cast<NodeId>(i + 1);
    nodes_.push_back(std::move(n));
  }
  auto engine = LocalEngine::Open(EngineAt(dir.path()));
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  node(1).local = std::move(*engine);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Open(i).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(store(i).Join(NodeList()).ok());

  std::string name;
  for (int f = 0; f < 64 && name.empty(); ++f) {
    const std::string n = "e" + std::to_string(f);
    ASSERT_TRUE(Publish(0, n, Content(f, 300000)).ok());
    if (LayoutOf(*Find(store(0), n)).replicas.front() == 2) name = n;
  }
  ASSERT_FALSE(name.empty());
  const std::string key = LayoutOf(*Find(store(0), name)).chunk_key;
  ASSERT_TRUE(store(1).HoldsChunk(key));

  // Close node 2's store and its engine, reopen both from disk.
  Stop(1);
  node(1).local.reset();
  engine = LocalEngine::Open(EngineAt(dir.path()));
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  node(1).local = std::move(*engine);
  ASSERT_TRUE(Restart(1).ok());
  EXPECT_TRUE(store(1).HoldsChunk(key)) << "the engine's chunk did not survive the restart";
  ASSERT_TRUE(Visible(1, name));

  Stop(0);  // the writer's copy is gone: node 3 must read from node 2's engine
  auto got = ReadAll(2, name);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(*got == Content(std::stoi(name.substr(1)), 300000));
}

TEST_F(ClusterStoreTest, ConcurrentChangesMergeLastWriterWins) {
  StartCluster(1, 1);
  ClusterStore& s = store(0);
  auto put = [&](uint64_t stamp, NodeId origin, const std::string& name) {
    wire::NamespaceUpdate u;
    u.origin = origin;
    wire::NamespaceRecord r;
    r.id = (uint64_t{2} << 48) | 5;
    r.parent = kRootId;
    r.name = name;
    r.stamp = stamp;
    r.origin = origin;
    u.puts.push_back(r);
    return s.ApplyNamespace(u);
  };
  auto remove = [&](uint64_t stamp, NodeId origin) {
    wire::NamespaceUpdate u;
    u.removes.push_back({(uint64_t{2} << 48) | 5, stamp, origin});
    return s.ApplyNamespace(u);
  };
  ASSERT_TRUE(put(10, 2, "x").ok());
  EXPECT_TRUE(Visible(0, "x"));
  ASSERT_TRUE(put(5, 3, "older").ok());  // an older change arriving late loses
  EXPECT_TRUE(Visible(0, "x"));
  ASSERT_TRUE(remove(7, 3).ok());  // so does an older remove
  EXPECT_TRUE(Visible(0, "x"));
  ASSERT_TRUE(put(10, 3, "tie").ok());  // equal stamps: the higher node id wins, on every node
  EXPECT_TRUE(Visible(0, "tie"));
  EXPECT_FALSE(Visible(0, "x"));
  ASSERT_TRUE(remove(20, 2).ok());
  EXPECT_FALSE(Visible(0, "tie"));
  ASSERT_TRUE(put(15, 3, "zombie").ok());  // the tombstone beats a put older than the remove
  EXPECT_FALSE(Visible(0, "zombie"));
  ASSERT_TRUE(put(25, 3, "reborn").ok());  // a later put does not
  EXPECT_TRUE(Visible(0, "reborn"));
}

}  // namespace
}  // namespace kvfs::cluster
