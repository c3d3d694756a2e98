// The TOML config file and the cluster flags: what the file sets, what flags override, and the
// bad inputs that must exit 2 with a message naming the key.
#include "config_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "kvfs/transport.h"
#include "mount_options.h"

namespace kvfs::fs {
namespace {

class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvfs-config-test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    mnt_ = dir_ + "/mnt";
    std::filesystem::create_directory(mnt_);
    secret_ = dir_ + "/secret";
    Write(secret_, "a-cluster-secret-of-enough-bytes\n");
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static void Write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }
  std::string Config(const std::string& text) {
    std::string path = dir_ + "/kvfs" + std::to_string(++n_) + ".toml";
    Write(path, text);
    return path;
  }
  ParsedCommandLine Parse(std::vector<std::string> args) {
    args.insert(args.begin(), {"kvfs", mnt_});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    return ParseMountOptions(static_cast<int>(argv.size()), argv.data());
  }
  // Parses a config with `text` and expects exit 2 with `word` in the message.
  void ExpectBad(const std::string& text, const std::string& word) {
    auto p = Parse({"--config", Config(text)});
    EXPECT_EQ(p.exit_code, 2) << text;
    EXPECT_FALSE(p.options) << text;
    EXPECT_NE(p.message.find(word), std::string::npos) << p.message;
  }

  std::string dir_, mnt_, secret_;
  int n_ = 0;
};

TEST_F(ConfigFileTest, FileSetsEveryKey) {
  auto p = Parse({"--config", Config(R"(
log_level = "debug"
[storage]
data_dir = "/tmp/kvfs-data-x"
capacity = "512M"
devices = ["/tmp/dev0:1G", "/tmp/dev1"]
durability = "async"
compress = "lz4"
eviction = "fifo"
high_watermark = 0.7
low_watermark = 0.5
[node]
id = 3
listen = "127.0.0.2:7400"
advertise = "10.0.0.2:7400"
[cluster]
etcd = ["http://127.0.0.1:2379", "https://etcd-2.example:2379"]
etcd_prefix = "/kvfs-a/"
etcd_api = "json"
replicas = 1
secret_file = ")" + secret_ + R"("
transport = "tcp"
request_timeout_ms = 250
lease_ttl_s = 7
etcd_history_s = 0
repair_bandwidth = "64M"
keep_local_copy = false
)")});
  ASSERT_TRUE(p.options) << p.message;
  const MountOptions& o = *p.options;
  EXPECT_EQ(o.log_level, "debug");
  EXPECT_EQ(o.data_dir, "/tmp/kvfs-data-x");
  EXPECT_EQ(o.capacity, 512ull << 20);
  ASSERT_EQ(o.devices.size(), 2u);
  EXPECT_EQ(o.devices[0].path, "/tmp/dev0");
  EXPECT_EQ(o.devices[0].size, 1ull << 30);
  EXPECT_EQ(o.durability, Durability::kAsync);
  EXPECT_EQ(o.compression, Compression::kLz4);
  EXPECT_EQ(o.eviction, "fifo");
  EXPECT_DOUBLE_EQ(o.high_watermark, 0.7);
  EXPECT_DOUBLE_EQ(o.low_watermark, 0.5);
  EXPECT_TRUE(o.cluster.enabled());
  EXPECT_EQ(o.cluster.node_id, 3);
  EXPECT_EQ(o.cluster.listen, "127.0.0.2:7400");
  EXPECT_EQ(o.cluster.advertise, "10.0.0.2:7400");
  EXPECT_EQ(o.cluster.etcd,
            (std::vector<std::string>{"http://127.0.0.1:2379", "https://etcd-2.example:2379"}));
  EXPECT_EQ(o.cluster.etcd_prefix, "/kvfs-a/");
  EXPECT_EQ(o.cluster.etcd_api, "json");
  EXPECT_EQ(o.cluster.replicas, 1u);
  EXPECT_EQ(o.cluster.secret_file, secret_);
  EXPECT_EQ(o.cluster.transport, "tcp");
  EXPECT_EQ(o.cluster.request_timeout_ms, 250u);
  EXPECT_EQ(o.cluster.lease_ttl_s, 7u);
  EXPECT_EQ(o.cluster.etcd_history_s, 0u);
  EXPECT_EQ(o.cluster.repair_bandwidth, 64ull << 20);
  EXPECT_FALSE(o.cluster.keep_local_copy);
}

TEST_F(ConfigFileTest, FlagsOverrideTheFile) {
  std::string path = Config(R"(
[storage]
capacity = "512M"
durability = "async"
[node]
id = 3
listen = "127.0.0.2:7400"
[cluster]
etcd = ["http://127.0.0.1:2379"]
etcd_api = "json"
replicas = 1
secret_file = ")" + secret_ +
                            R"("
)");
  auto p = Parse({"-o",
                  "config=" + path + ",allow_other",
                  "--capacity",
                  "1G",
                  "--node-id",
                  "5",
                  "--listen",
                  "127.0.0.4:7500",
                  "--etcd",
                  "http://127.0.0.7:2379,http://127.0.0.8:2379",
                  "--replicas",
                  "2",
                  "--transport",
                  "auto",
                  "--etcd-api",
                  "grpc",
                  "--request-timeout",
                  "300",
                  "--lease-ttl",
                  "3",
                  "--etcd-history",
                  "60",
                  "--repair-bandwidth",
                  "10M"});
  ASSERT_TRUE(p.options) << p.message;
  const MountOptions& o = *p.options;
  EXPECT_EQ(o.config_file, path);
  EXPECT_EQ(o.fuse_options, std::vector<std::string>{"allow_other"});  // config= taken out
  EXPECT_EQ(o.capacity, 1ull << 30);
  EXPECT_EQ(o.durability, Durability::kAsync);  // from the file: no flag given
  EXPECT_EQ(o.cluster.node_id, 5);
  EXPECT_EQ(o.cluster.listen, "127.0.0.4:7500");
  EXPECT_EQ(o.cluster.etcd,  // --etcd replaces the file's list
            (std::vector<std::string>{"http://127.0.0.7:2379", "http://127.0.0.8:2379"}));
  EXPECT_EQ(o.cluster.replicas, 2u);
  EXPECT_EQ(o.cluster.transport, "auto");
  EXPECT_EQ(o.cluster.etcd_api, "grpc");  // the flag over the file's "json"
  EXPECT_EQ(o.cluster.request_timeout_ms, 300u);
  EXPECT_EQ(o.cluster.lease_ttl_s, 3u);
  EXPECT_EQ(o.cluster.etcd_history_s, 60u);
  EXPECT_EQ(o.cluster.repair_bandwidth, 10ull << 20);
}

TEST_F(ConfigFileTest, RelativePathsAreTakenFromTheFilesDirectory) {
  // kvfs may be started from anywhere (a unit file runs it in /): the file's author means
  // paths beside the file. A flag's relative path stays the caller's.
  std::filesystem::create_directories(dir_ + "/etc");
  Write(dir_ + "/etc/secret", "a-cluster-secret-of-enough-bytes\n");
  const std::string path = dir_ + "/etc/kvfs.toml";
  Write(path, R"(
data_dir = "../state"
devices = ["disks/d0:1G", "/abs/d1"]
[node]
id = 3
listen = "127.0.0.1:7000"
[cluster]
etcd = ["http://127.0.0.1:2379"]
secret_file = "secret"
)");
  auto p = Parse({"--config", path});
  ASSERT_TRUE(p.options) << p.message;
  const MountOptions& o = *p.options;
  EXPECT_EQ(o.data_dir, dir_ + "/state");
  ASSERT_EQ(o.devices.size(), 2u);
  EXPECT_EQ(o.devices[0].path, dir_ + "/etc/disks/d0");
  EXPECT_EQ(o.devices[1].path, "/abs/d1");
  EXPECT_EQ(o.cluster.secret_file, dir_ + "/etc/secret");

  auto q = Parse({"--config", path, "--data", "here"});
  ASSERT_TRUE(q.options) << q.message;
  EXPECT_EQ(q.options->data_dir, (std::filesystem::current_path() / "here").string());
}

TEST_F(ConfigFileTest, SingleNodeNeedsNoConfig) {
  auto p = Parse({});
  ASSERT_TRUE(p.options) << p.message;
  EXPECT_FALSE(p.options->cluster.enabled());
  EXPECT_TRUE(p.options->config_file.empty());
  // Storage keys also work at the top level, with no cluster at all.
  auto q = Parse({"--config", Config("capacity = 268435456\ncompress = \"auto\"\n")});
  ASSERT_TRUE(q.options) << q.message;
  EXPECT_EQ(q.options->capacity, 256ull << 20);
  EXPECT_EQ(q.options->compression, Compression::kAuto);
  EXPECT_FALSE(q.options->cluster.enabled());
}

TEST_F(ConfigFileTest, BadFilesExitTwoNamingTheKey) {
  ExpectBad("[storage]\ncapacty = \"1G\"\n", "storage.capacty: unknown key");
  ExpectBad("bogus = 1\n", "bogus: unknown key");
  ExpectBad("[nodes]\nid = 1\n", "nodes: unknown key");
  ExpectBad("[storage]\ncapacity = true\n", "storage.capacity");
  ExpectBad("[storage]\ncapacity = \"12Q\"\n", "storage.capacity");
  ExpectBad("[storage]\ndurability = \"sometimes\"\n", "storage.durability");
  ExpectBad("[storage]\nhigh_watermark = 1.5\n", "storage.high_watermark");
  ExpectBad("[node]\nid = \"one\"\n", "node.id: expected an integer");
  ExpectBad("[node]\nid = 70000\n", "node.id");
  ExpectBad("[node]\nid = 1\nlisten = \"127.0.0.2\"\n", "node.listen");
  ExpectBad("[node]\nid = 1\nlisten = \"127.0.0.2:99999\"\n", "node.listen");
  ExpectBad("[node]\nid = 1\nlisten = \"300.1.1.1:7400\"\n", "node.listen");
  ExpectBad("[cluster]\ntransport = \"udp\"\n", "cluster.transport");
  ExpectBad("[cluster]\netcd_api = \"http\"\n", "cluster.etcd_api");
  ExpectBad("[cluster]\nreplicas = 0\n", "cluster.replicas");
  // Static peer lists are gone: membership comes from etcd.
  ExpectBad("[[cluster.peers]]\nid = 2\n", "cluster.peers: unknown key");
  ExpectBad("[[peer]]\nid = 2\naddress = \"127.0.0.3:7400\"\n", "peer: unknown key");
  ExpectBad("[storage\ncapacity = 1\n", "config");  // TOML syntax error
  // A binary file: the message quotes the bad line with its raw bytes escaped.
  std::string binary = "\x01\xfe\xff\x1b[2J \xc3\xa9t\xc3";
  auto garbage = Parse({"--config", Config(binary)});
  EXPECT_EQ(garbage.exit_code, 2);
  EXPECT_NE(garbage.message.find("\\x01\\xfe\\xff\\x1b[2J \xc3\xa9t\\xc3"), std::string::npos)
      << garbage.message;
  for (char c : garbage.message) EXPECT_TRUE(c == '\n' || static_cast<unsigned char>(c) >= 0x20);
  auto missing = Parse({"--config", dir_ + "/no-such.toml"});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.message.find("no-such.toml"), std::string::npos);
  // Not a config at all: /dev/zero used to parse as an empty file (every default), a FIFO
  // could block the start; a huge file or one with NUL bytes is no TOML text either.
  for (const auto& [path, why] : std::vector<std::pair<std::string, std::string>>{
           {"/dev/zero", "not a regular file"}, {dir_, "not a regular file"}}) {
    auto p = Parse({"--config", path});
    EXPECT_EQ(p.exit_code, 2) << path;
    EXPECT_NE(p.message.find(why), std::string::npos) << p.message;
  }
  const std::string fifo = dir_ + "/fifo.toml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto f = Parse({"--config", fifo});  // returns: nobody writes to the FIFO
  EXPECT_EQ(f.exit_code, 2);
  EXPECT_NE(f.message.find("not a regular file"), std::string::npos) << f.message;
  auto nul = Parse({"--config", Config("capacity = \"1G\"\n" + std::string(2, '\0'))});
  EXPECT_EQ(nul.exit_code, 2);
  EXPECT_NE(nul.message.find("NUL"), std::string::npos) << nul.message;
  auto huge = Parse({"--config", Config("# " + std::string(2 << 20, 'x') + "\n")});
  EXPECT_EQ(huge.exit_code, 2);
  EXPECT_NE(huge.message.find("too large"), std::string::npos) << huge.message;
}

TEST_F(ConfigFileTest, BadClusterSettingsExitTwo) {
  const std::string s = "\"" + secret_ + "\"";
  const std::string etcd = "etcd = [\"http://127.0.0.1:2379\"]\n";
  ExpectBad("[node]\nid = 1\nlisten = \"127.0.0.2\"\n", "node.listen");
  ExpectBad("[node]\nid = 1\nlisten = \"127.0.0.2:99999\"\n", "node.listen");
  ExpectBad("[node]\nid = 1\nlisten = \"300.1.1.1:7400\"\n", "node.listen");
  ExpectBad("[cluster]\netcd = \"http://127.0.0.1:2379\"\n", "cluster.etcd");
  ExpectBad("[cluster]\netcd = [\"127.0.0.1:2379\"]\n", "cluster.etcd");
  ExpectBad("[cluster]\netcd = [\"http://127.0.0.1\"]\n", "cluster.etcd");
  ExpectBad("[cluster]\netcd = []\n", "cluster.etcd");
  ExpectBad("[cluster]\nlease_ttl_s = 1\n", "cluster.lease_ttl_s");
  ExpectBad("[cluster]\netcd_history_s = -1\n", "cluster.etcd_history_s");
  ExpectBad("[cluster]\nrepair_bandwidth = \"1K\"\n", "cluster.repair_bandwidth");
  ExpectBad("[[cluster.peers]]\nid = 2\naddress = \"127.0.0.3:7400\"\n", "cluster.peers");
  // Cluster keys without etcd: not a cluster, and not silently a single node either.
  ExpectBad("[node]\nid = 1\nlisten = \"127.0.0.2:7400\"\n", "etcd");
  // With etcd: a node id, a listen address and a readable secret are required.
  ExpectBad("[node]\nlisten = \"127.0.0.2:7400\"\n[cluster]\n" + etcd + "secret_file = " + s + "\n",
            "node id");
  ExpectBad("[node]\nid = 1\n[cluster]\n" + etcd + "secret_file = " + s + "\n", "--listen");
  ExpectBad("[node]\nid = 1\nlisten = \"127.0.0.2:7400\"\n[cluster]\n" + etcd, "secret");
  ExpectBad("[node]\nid = 1\nlisten = \"127.0.0.2:7400\"\n[cluster]\n" + etcd + "secret_file = \"" +
                dir_ + "/missing\"\n",
            "secret file");
  ExpectBad("[node]\nid = 1\nlisten = \"127.0.0.2:7400\"\n[cluster]\n" + etcd +
                "secret_file = " + s + "\netcd_cert = \"" + secret_ + "\"\n",
            "certificate and its key");
  ExpectBad("[node]\nid = 1\nlisten = \"127.0.0.2:7400\"\n[cluster]\n" + etcd +
                "secret_file = " + s + "\netcd_ca = \"" + dir_ + "/no-ca.pem\"\n",
            "no-ca.pem");
  // Not files: the TLS handshake would read /dev/zero for ever; the secret file likewise.
  ExpectBad("[node]\nid = 1\nlisten = \"127.0.0.2:7400\"\n[cluster]\n" + etcd +
                "secret_file = " + s + "\netcd_ca = \"/dev/zero\"\n",
            "etcd TLS file /dev/zero: not a regular file");
  ExpectBad("[node]\nid = 1\nlisten = \"127.0.0.2:7400\"\n[cluster]\n" + etcd +
                "secret_file = \"/dev/zero\"\n",
            "/dev/zero: not a regular file");
  // The same through flags.
  EXPECT_EQ(Parse({"--listen", "127.0.0.2:7400", "--node-id", "1"}).exit_code, 2);
  EXPECT_EQ(Parse({"--etcd", "http://127.0.0.1:2379", "--listen", "127.0.0.2", "--node-id", "1",
                   "--secret-file", secret_})
                .exit_code,
            2);
  EXPECT_EQ(Parse({"--etcd", "ftp://127.0.0.1:2379", "--listen", "127.0.0.2:1", "--node-id", "1",
                   "--secret-file", secret_})
                .exit_code,
            2);
  EXPECT_EQ(Parse({"--etcd", "http://127.0.0.1:2379,", "--listen", "127.0.0.2:1", "--node-id", "1",
                   "--secret-file", secret_})
                .exit_code,
            2);
  EXPECT_EQ(Parse({"--etcd", "http://127.0.0.1:2379", "--node-id", "0", "--listen", "127.0.0.2:1",
                   "--secret-file", secret_})
                .exit_code,
            2);
  auto ok = Parse({"--etcd", "http://127.0.0.1:2379", "--node-id", "1", "--listen",
                   "127.0.0.2:7400", "--secret-file", secret_});
  EXPECT_TRUE(ok.options) << ok.message;
  // More copies than a holder list keeps (7): refused at the command line, not at the start.
  EXPECT_EQ(Parse({"--etcd", "http://127.0.0.1:2379", "--node-id", "1", "--listen",
                   "127.0.0.2:7400", "--secret-file", secret_, "--replicas", "8"})
                .exit_code,
            2);
  ExpectBad("[cluster]\nreplicas = 8\n", "cluster.replicas");
}

TEST_F(ConfigFileTest, AWildcardAddressOtherNodesWouldDialIsRefused) {
  // Peers dial what a node advertises; 0.0.0.0 or :: there would have each dial itself.
  auto parse = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"--etcd", "http://127.0.0.1:2379", "--node-id",
                                     "1",      "--secret-file",         secret_};
    args.insert(args.end(), extra.begin(), extra.end());
    return Parse(args);
  };
  for (const char* wildcard : {"0.0.0.0:7400", "[::]:7400", "[0:0::0]:7400"}) {
    auto bad = parse({"--listen", wildcard});
    EXPECT_EQ(bad.exit_code, 2) << wildcard;
    EXPECT_NE(bad.message.find("wildcard address other nodes cannot dial"), std::string::npos)
        << bad.message;
    EXPECT_NE(bad.message.find("--advertise"), std::string::npos) << bad.message;
    auto advertised = parse({"--listen", wildcard, "--advertise", "10.0.0.7:7400"});
    EXPECT_TRUE(advertised.options) << wildcard << ": " << advertised.message;
    EXPECT_EQ(parse({"--listen", "127.0.0.2:7400", "--advertise", wildcard}).exit_code, 2)
        << wildcard;
  }
  const std::string s = "\"" + secret_ + "\"";
  ExpectBad(
      "[node]\nid = 1\nlisten = \"0.0.0.0:7400\"\n[cluster]\netcd = "
      "[\"http://127.0.0.1:2379\"]\nsecret_file = " +
          s + "\n",
      "wildcard");
}

TEST_F(ConfigFileTest, RdmaWithoutADeviceIsAnErrorAutoFallsBack) {
  if (RdmaDeviceAvailable()) GTEST_SKIP() << "this host has an RDMA device";
  auto rdma = Parse({"--etcd", "http://127.0.0.1:2379", "--node-id", "1", "--listen",
                     "127.0.0.2:7400", "--secret-file", secret_, "--transport", "rdma"});
  EXPECT_EQ(rdma.exit_code, 2);
  EXPECT_NE(rdma.message.find("no RDMA device"), std::string::npos) << rdma.message;
  auto any = Parse({"--etcd", "http://127.0.0.1:2379", "--node-id", "1", "--listen",
                    "127.0.0.2:7400", "--secret-file", secret_, "--transport", "auto"});
  EXPECT_TRUE(any.options) << any.message;
}

}  // namespace
}  // namespace kvfs::fs
