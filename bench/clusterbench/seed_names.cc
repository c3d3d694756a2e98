// kvfs-seed-names: writes N published files straight into a cluster's etcd namespace, exactly
// as a publishing node would commit them (record key + name key per file, record_value.h), so
// clusterbench can measure a late joiner and the daemon's memory at a million names without
// hours of publishing through FUSE on a small machine.
//
// The files live in one directory under the root, created here (or reused when a directory of
// that name already exists). Each file's layout names one chunk held by --holder, a node that
// need not run: the bench only lists and stats the names, and a node repairs only the chunks
// it holds itself, so nothing tries to read or re-replicate them. Ids are taken from the id
// space of --origin (its node id in the high 16 bits, namespace_keys.h), which must be a node
// that never runs in this cluster.
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "cluster_layout.h"
#include "kvfs/etcd.h"
#include "namespace_keys.h"
#include "record_value.h"

namespace {

using kvfs::ObjectId;
using kvfs::ObjectRecord;
using kvfs::ObjectType;
using kvfs::cluster::HolderList;
using kvfs::cluster::NamespaceKeys;

// etcd's default --max-txn-ops is 128: 64 files of two keys each.
constexpr size_t kFilesPerTxn = 64;

struct Options {
  std::vector<std::string> etcd;
  std::string prefix = "/kvfs/";
  std::string dir = "seed";
  std::string tag;  // distinguishes the names of a second seeding into the same directory
  uint64_t count = 0;
  uint64_t first = 0;  // index of the first file (ids and names continue from here)
  uint64_t size = 2 << 20;
  unsigned name_len = 64;
  unsigned origin = 60000;
  unsigned holder = 60001;
  unsigned threads = 4;
};

// A name like a connector's: the prefix hash as hex, padded to --name-len characters.
std::string FileName(const Options& o, uint64_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, static_cast<uint64_t>(i * 0x9e3779b97f4a7c15ULL));
  std::string name = o.tag + buf;
  while (name.size() < o.name_len) name += buf;
  name.resize(std::max<size_t>(o.name_len, o.tag.size() + 16));  // never cut the hash
  return name;
}

kvfs::etcd::TxnOp Put(std::string key, std::string value) {
  kvfs::etcd::TxnOp op;
  op.key = std::move(key);
  op.value = std::move(value);
  return op;
}

ObjectId IdOf(const Options& o, uint64_t local) { return (uint64_t{o.origin} << 48) | local; }

ObjectRecord BaseRecord(ObjectType type, uint32_t mode) {
  ObjectRecord r;
  r.type = type;
  r.mode = mode;
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  r.mtime.sec = std::chrono::duration_cast<std::chrono::seconds>(now).count();
  r.atime = r.ctime = r.mtime;
  return r;
}

// The directory's id: an existing one of that name, else a new record. 0 on failure.
ObjectId EnsureDir(kvfs::etcd::Client& etcd, const NamespaceKeys& keys, const Options& o) {
  kvfs::etcd::RangeRequest range;
  range.key = keys.Name(kvfs::kRootId, o.dir);
  auto got = etcd.Range(range);
  if (!got.ok()) {
    std::fprintf(stderr, "etcd range: %s\n", got.status().ToString().c_str());
    return 0;
  }
  if (!got->kvs.empty()) {
    auto id = kvfs::cluster::ParseHex16(got->kvs[0].value);
    return id.value_or(0);
  }
  ObjectRecord d = BaseRecord(ObjectType::kDirectory, 0755);
  d.id = IdOf(o, 1);
  d.parent = kvfs::kRootId;
  d.name = o.dir;
  kvfs::etcd::TxnRequest txn;
  kvfs::etcd::Compare free;  // version == 0: the name is free
  free.key = keys.Name(kvfs::kRootId, o.dir);
  txn.compare.push_back(free);
  txn.success.push_back(
      Put(keys.Record(d.id), kvfs::cluster::EncodeRecordValue(d, static_cast<uint16_t>(o.origin))));
  txn.success.push_back(Put(keys.Name(kvfs::kRootId, o.dir), kvfs::cluster::Hex16(d.id)));
  auto r = etcd.Txn(txn);
  if (!r.ok() || !r->succeeded) {
    std::fprintf(stderr, "creating /%s failed\n", o.dir.c_str());
    return 0;
  }
  return d.id;
}

// Files [from, to) in transactions of kFilesPerTxn; false on the first error.
bool SeedRange(kvfs::etcd::Client& etcd, const NamespaceKeys& keys, const Options& o, ObjectId dir,
               uint64_t from, uint64_t to, std::atomic<uint64_t>& done) {
  HolderList holders;
  holders.Add(static_cast<kvfs::cluster::NodeId>(o.holder));
  for (uint64_t i = from; i < to;) {
    kvfs::etcd::TxnRequest txn;
    for (uint64_t end = std::min(to, i + kFilesPerTxn); i < end; ++i) {
      ObjectRecord f = BaseRecord(ObjectType::kFile, 0644);
      // Local ids 2.. are files, 2^40.. their chunks: both unique in the origin's id space.
      f.id = IdOf(o, 2 + i);
      f.parent = dir;
      f.name = FileName(o, i);
      f.layout = kvfs::cluster::MakeClusterLayout(o.size, IdOf(o, (uint64_t{1} << 40) + i), holders,
                                                  /*checksum=*/i + 1);
      txn.success.push_back(Put(
          keys.Record(f.id), kvfs::cluster::EncodeRecordValue(f, static_cast<uint16_t>(o.origin))));
      txn.success.push_back(Put(keys.Name(dir, f.name), kvfs::cluster::Hex16(f.id)));
    }
    auto r = etcd.Txn(txn);
    if (!r.ok()) {
      std::fprintf(stderr, "etcd txn: %s\n", r.status().ToString().c_str());
      return false;
    }
    done += txn.success.size() / 2;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"Writes N published files into a kvfs cluster's etcd namespace (benchmarks only)"};
  app.add_option("--etcd", o.etcd, "etcd endpoint(s)")->required()->delimiter(',');
  app.add_option("--prefix", o.prefix, "the cluster's etcd key prefix");
  app.add_option("--dir", o.dir, "directory under the mount root");
  app.add_option("--tag", o.tag, "prefix of every name (a second seeding needs its own)");
  app.add_option("--count", o.count, "files to write")->required();
  app.add_option("--first", o.first, "index of the first file (a second seeding continues)");
  app.add_option("--size", o.size, "each file's size in bytes (its data is never stored)");
  app.add_option("--name-len", o.name_len, "characters per name")->check(CLI::Range(8, 255));
  app.add_option("--origin", o.origin, "node id whose id space is used (never a running node)")
      ->check(CLI::Range(1, 65535));
  app.add_option("--holder", o.holder, "node id named as each chunk's holder")
      ->check(CLI::Range(1, 65535));
  app.add_option("--threads", o.threads, "concurrent transactions")->check(CLI::Range(1, 64));
  CLI11_PARSE(app, argc, argv);
  // File ids are 2 + index and chunk ids 2^40 + index in the origin's id space: keep them apart.
  if (o.first + o.count >= (uint64_t{1} << 40) - 2) {
    std::fprintf(stderr, "--first + --count must stay below 2^40\n");
    return 2;
  }

  kvfs::etcd::ClientOptions client_options;
  client_options.endpoints = o.etcd;
  client_options.request_timeout = std::chrono::seconds(30);  // big transactions, busy etcd
  auto client = kvfs::etcd::MakeClient(client_options);
  if (!client.ok()) {
    std::fprintf(stderr, "etcd: %s\n", client.status().ToString().c_str());
    return 1;
  }
  kvfs::etcd::Client& etcd = **client;
  NamespaceKeys keys(o.prefix);
  const ObjectId dir = EnsureDir(etcd, keys, o);
  if (dir == 0) return 1;

  const auto t0 = std::chrono::steady_clock::now();
  std::atomic<uint64_t> done{0};
  std::atomic<bool> failed{false};
  std::vector<std::thread> workers;
  const uint64_t per = (o.count + o.threads - 1) / o.threads;
  for (unsigned t = 0; t < o.threads; ++t) {
    const uint64_t from = o.first + t * per;
    const uint64_t to = std::min(o.first + o.count, from + per);
    if (from >= to) break;
    workers.emplace_back([&, from, to] {
      if (!SeedRange(etcd, keys, o, dir, from, to, done)) failed = true;
    });
  }
  for (auto& w : workers) w.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("{\"files\": %" PRIu64 ", \"seconds\": %.2f, \"dir_id\": \"%s\"}\n", done.load(), s,
              kvfs::cluster::Hex16(dir).c_str());
  return failed ? 1 : 0;
}
