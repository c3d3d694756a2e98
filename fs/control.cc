#include "control.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>

#include "json_text.h"
#include "kvfs/version.h"
#include "splice_reply.h"

namespace kvfs::fs {
namespace {

struct ControlFile {
  const char* name;
  uint64_t ino;
  uint32_t mode;
};
constexpr ControlFile kFiles[] = {
    {"status", Control::kStatusIno, 0444},
    {"stats", Control::kStatsIno, 0444},
    {"ctl", Control::kCtlIno, 0666},
    {"nodes", Control::kNodesIno, 0444},
};

double Seconds(const Timespec64& t) {
  return static_cast<double>(t.sec) + static_cast<double>(t.nsec) / 1e9;
}

std::string Hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

EntryInfo Synthetic(uint64_t ino, uint32_t mode) {
  EntryInfo e;
  e.attr.st_ino = ino;
  e.attr.st_mode = mode;
  e.attr.st_nlink = S_ISDIR(mode) ? 2 : 1;
  e.attr.st_uid = getuid();
  e.attr.st_gid = getgid();
  e.attr.st_blksize = 4096;
  // Contents are generated per open and served with direct_io, so the size stays 0.
  Timespec64 now = Now();
  e.attr.st_atim.tv_sec = e.attr.st_mtim.tv_sec = e.attr.st_ctim.tv_sec = now.sec;
  e.stable = false;
  return e;
}

std::vector<std::string> SplitWords(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace

Control::Control(Namespace* ns, ChunkStore* store, DaemonInfo info)
    : ns_(ns), store_(store), info_(std::move(info)) {
  Register("help", "list commands", [this](const std::vector<std::string>&) {
    nlohmann::json cmds = nlohmann::json::object();
    std::lock_guard lock(mu_);
    for (const auto& [name, reg] : commands_) cmds[name] = reg.help;
    return Result<nlohmann::json>(nlohmann::json{{"commands", cmds}});
  });
  Register("status", "the same JSON as .kvfs/status", [this](const std::vector<std::string>&) {
    return Result<nlohmann::json>(StatusJson());
  });
  // kvfsctl drain: no new copies go to the node, and its chunks are copied elsewhere.
  for (const bool drain : {true, false}) {
    Register(drain ? "drain" : "undrain",
             drain ? "drain [NODE]: move copies off a node (default: this one) before removal"
                   : "undrain [NODE]: take copies on that node again",
             [this, drain](const std::vector<std::string>& args) -> Result<nlohmann::json> {
               unsigned long node = 0;
               if (args.size() > 1) return Status::Invalid("usage: drain [NODE]");
               if (!args.empty()) {
                 char* end = nullptr;
                 node = std::strtoul(args[0].c_str(), &end, 10);
                 if (args[0].empty() || *end != '\0' || node > 65535)
                   return Status::Invalid("bad node id '" + args[0] + "'");
               }
               KVFS_RETURN_IF_ERROR(store_->SetDraining(static_cast<uint16_t>(node), drain));
               return nlohmann::json{{"node", node}, {"draining", drain}};
             });
  }
  Register("sync", "flush the journal and write a checkpoint",
           [this](const std::vector<std::string>&) -> Result<nlohmann::json> {
             KVFS_RETURN_IF_ERROR(ns_->PersistLazy());
             KVFS_RETURN_IF_ERROR(store_->Sync());
             return nlohmann::json::object();
           });
}

void Control::Register(const std::string& name, const std::string& help, Command command) {
  std::lock_guard lock(mu_);
  commands_[name] = Registered{help, std::move(command)};
}

nlohmann::json Control::Execute(const std::string& line) {
  std::vector<std::string> words = SplitWords(line);
  auto failure = [](int err, const std::string& msg) {
    return nlohmann::json{{"ok", false}, {"errno", err}, {"error", msg}};
  };
  if (words.empty()) return failure(EINVAL, "empty command (try: help)");
  Command command;
  {
    std::lock_guard lock(mu_);
    auto it = commands_.find(words[0]);
    if (it == commands_.end()) return failure(EINVAL, "unknown command '" + words[0] + "'");
    command = it->second.command;
  }
  words.erase(words.begin());
  Result<nlohmann::json> reply = command(words);
  if (!reply.ok()) return failure(reply.status().err(), reply.status().message());
  nlohmann::json out = std::move(*reply);
  if (!out.is_object()) out = nlohmann::json{{"result", out}};
  out["ok"] = true;
  return out;
}

Result<EntryInfo> Control::Lookup(uint64_t parent, std::string_view name) {
  if (parent == kRootId && name == kControlDirName) return GetAttr(kDirIno);
  if (parent != kDirIno) return Status::NotFound("no such entry");
  for (const auto& f : kFiles)
    if (name == f.name) return GetAttr(f.ino);
  return Status::NotFound("no such control file");
}

Result<EntryInfo> Control::GetAttr(uint64_t ino) {
  if (ino == kDirIno) return Synthetic(ino, S_IFDIR | 0755);
  for (const auto& f : kFiles)
    if (ino == f.ino) return Synthetic(ino, S_IFREG | f.mode);
  return Status::NotFound("no such control inode");
}

Status Control::Readdir(
    uint64_t ino, uint64_t offset,
    const std::function<bool(const std::string&, uint64_t, uint32_t, uint64_t)>& emit) {
  if (ino != kDirIno) return Status::Error(ENOTDIR, "not a directory");
  if (offset < 1 && !emit(".", kDirIno, S_IFDIR, 1)) return Status::Ok();
  if (offset < 2 && !emit("..", kRootId, S_IFDIR, 2)) return Status::Ok();
  uint64_t cookie = 3;
  for (const auto& f : kFiles) {
    if (offset < cookie && !emit(f.name, f.ino, S_IFREG, cookie)) break;
    ++cookie;
  }
  return Status::Ok();
}

Result<ControlHandle*> Control::Open(uint64_t ino, int flags) {
  if (ino == kDirIno) return Status::Error(EISDIR, "is a directory");
  auto h = std::make_unique<ControlHandle>();
  h->ino = ino;
  int acc = flags & O_ACCMODE;
  if (ino == kNodesIno) {
    if (acc != O_RDONLY) return Status::Error(EACCES, "read-only control file");
    h->content = JsonText(NodesJson(), 2) + "\n";
  } else if (ino == kStatusIno || ino == kStatsIno) {
    if (acc != O_RDONLY) return Status::Error(EACCES, "read-only control file");
    h->content = ino == kStatusIno ? JsonText(StatusJson(), 2) + "\n" : StatsText();
  } else if (ino != kCtlIno) {
    return Status::NotFound("no such control file");
  }
  h->write_only = acc == O_WRONLY;
  return h.release();
}

Result<size_t> Control::Read(ControlHandle* h, uint64_t offset, char* out, size_t len) {
  std::lock_guard lock(h->mu);
  // ctl replies are read from a cursor: after write(2) the fd offset is past the command, and
  // "write a command, read the reply" should work with plain read(2).
  size_t from = h->ino == kCtlIno ? h->cursor : offset;
  if (from >= h->content.size()) return size_t{0};
  size_t n = std::min(len, h->content.size() - from);
  std::memcpy(out, h->content.data() + from, n);
  if (h->ino == kCtlIno) h->cursor += n;
  return n;
}

Result<size_t> Control::Write(ControlHandle* h, const char* data, size_t len) {
  if (h->ino != kCtlIno) return Status::Error(EBADF, "read-only control file");
  if (len > 64 * 1024) return Status::Invalid("command too long");
  std::string line(data, len);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  nlohmann::json reply = Execute(line);
  if (h->write_only && !reply.value("ok", false)) {
    return Status::Error(reply.value("errno", EIO), reply.value("error", std::string("failed")));
  }
  std::lock_guard lock(h->mu);
  h->content = JsonText(reply) + "\n";
  h->cursor = 0;
  return len;
}

nlohmann::json Control::StatusJson() {
  StoreStats s = store_->Stats();
  const LookupCounters& c = ns_->counters();
  auto uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::vector<std::string> devices = s.devices.empty() ? info_.devices : s.devices;
  return nlohmann::json{
      {"version", KVFS_VERSION},
      {"pid", static_cast<int64_t>(getpid())},
      {"mountpoint", info_.mountpoint},
      {"data_dir", info_.data_dir},
      {"devices", devices},
      {"durability", info_.durability},
      {"compression", info_.compression},
      {"metrics_address", info_.metrics},
      {"segment_size", s.segment_size},
      {"capacity_bytes", s.capacity_bytes},
      {"used_bytes", s.used_bytes},
      {"free_bytes", s.capacity_bytes > s.used_bytes ? s.capacity_bytes - s.used_bytes : 0},
      {"logical_bytes", s.logical_bytes},
      {"stored_bytes", s.stored_bytes},
      // Raw bytes per stored byte of published files: > 1 when compression pays off.
      {"compression_ratio",
       s.stored_bytes ? static_cast<double>(s.logical_bytes) / static_cast<double>(s.stored_bytes)
                      : 1.0},
      {"files", s.files},
      {"objects", s.objects},
      {"inodes_in_memory", ns_->inode_count()},
      {"open_files", OpenFileCount::now()},
      {"reads", s.reads},
      {"writes", s.writes},
      {"bytes_read", s.bytes_read},
      {"bytes_written", s.bytes_written},
      {"lookups", c.lookups.load()},
      {"lookup_hits", c.hits.load()},
      {"lookup_misses", c.misses.load()},
      // The cache's hit rate (kvfsctl(8), STATUS): reads of a published file vs. checks that
      // found nothing.
      {"hits", c.read_hits.load()},
      {"misses", c.cache_misses.load()},
      {"read_replies_spliced", ReadReplies().spliced.load()},
      {"read_replies_splice_fallbacks", ReadReplies().splice_fallbacks.load()},
      {"read_replies_copied", ReadReplies().copied.load()},
      {"read_bytes_spliced", ReadReplies().spliced_bytes.load()},
      {"read_bytes_copied", ReadReplies().copied_bytes.load()},
      {"readahead_hits", s.readahead_hits},
      {"readahead_misses", s.readahead_misses},
      {"readahead_wasted", s.readahead_wasted},
      {"checksum_failures", s.checksum_failures},
      {"corrupt_dropped", s.corrupt_dropped},
      {"evictions", s.evictions},
      {"eviction_policy", s.eviction_policy},
      {"high_watermark", s.high_watermark},
      {"low_watermark", s.low_watermark},
      {"journal_bytes", s.journal_bytes},
      {"read_only", s.read_only},
      {"recovery_damaged_records", s.recovery_damaged_records},
      {"recovery_damaged_checkpoints", s.recovery_damaged_checkpoints},
      {"recovery_repaired_superblocks", s.recovery_repaired_superblocks},
      {"recovery_notes", s.recovery_notes},
      {"uptime_s", uptime},
  };
}

std::string Control::StatsText() {
  const nlohmann::json status = StatusJson();
  std::string out;
  for (auto it = status.cbegin(); it != status.cend(); ++it) {
    if (!it->is_number()) continue;
    out += it.key() + " " + JsonText(*it) + "\n";
  }
  return out;
}

Result<nlohmann::json> Control::FileStatJson(uint64_t ino) {
  KVFS_ASSIGN_OR_RETURN(ObjectRecord rec, ns_->Record(ino));
  KVFS_ASSIGN_OR_RETURN(EntryInfo entry, ns_->GetAttr(ino));
  const char* type = rec.type == ObjectType::kDirectory ? "directory"
                     : rec.type == ObjectType::kSymlink ? "symlink"
                                                        : "file";
  std::vector<std::string> store_devices = store_->Stats().devices;
  // An xattr value is at most 64 KiB (XATTR_SIZE_MAX): a 2 GiB file's 2,048 segments would not
  // fit, and getxattr would fail with E2BIG. The first kMaxListedSegments are listed; the
  // totals cover all of them.
  constexpr size_t kMaxListedSegments = 256;
  nlohmann::json segments = nlohmann::json::array();
  std::set<uint16_t> used;
  uint64_t stored = 0;
  const size_t count = rec.layout ? rec.layout->segments.size() : 0;
  if (rec.layout) {
    for (const auto& seg : rec.layout->segments) {
      used.insert(seg.device);
      stored += seg.stored_len;
      if (segments.size() >= kMaxListedSegments) continue;
      segments.push_back({{"index", seg.index},
                          {"device", seg.device},
                          {"offset", seg.offset},
                          {"stored_len", seg.stored_len},
                          {"raw_len", seg.raw_len},
                          {"codec", seg.codec == Codec::kLz4 ? "lz4" : "none"},
                          {"checksum", Hex64(seg.checksum)}});
    }
  }
  nlohmann::json devices = nlohmann::json::array();
  for (uint16_t d : used)
    devices.push_back(d < store_devices.size() ? store_devices[d] : std::to_string(d));
  return nlohmann::json{
      {"id", rec.id},
      {"type", type},
      {"size", static_cast<uint64_t>(entry.attr.st_size)},
      {"published_size", rec.size()},
      {"state", !ns_->Journaled(ino) ? "unpublished"
                : entry.stable       ? "published"
                                     : "writing"},
      {"mode", rec.mode},
      {"atime", Seconds(rec.atime)},
      {"mtime", Seconds(rec.mtime)},
      {"ctime", Seconds(rec.ctime)},
      {"pinned", (rec.flags & kFlagPinned) != 0},
      {"segment_count", count},
      {"stored_bytes", stored},
      {"segments", segments},
      {"devices", devices},
  };
}

nlohmann::json Control::NodesJson() {
  const ClusterView v = store_->Cluster();
  nlohmann::json nodes = nlohmann::json::array();
  for (const NodeView& n : v.nodes) {
    nodes.push_back({{"id", n.id},
                     {"address", n.address},
                     {"state", n.state},
                     {"capacity_bytes", n.capacity_bytes},
                     {"used_bytes", n.used_bytes},
                     {"replicas", n.replicas},
                     {"gets_sent", n.gets_sent},
                     {"puts_sent", n.puts_sent},
                     {"failures", n.failures},
                     {"hedged_around", n.hedged_around},
                     {"unanswering", n.unanswering},
                     {"unreachable", n.unreachable}});
  }
  return nlohmann::json{
      {"self", v.self},
      {"replicas", v.replicas},
      {"transport", v.transport},
      {"etcd", v.etcd},
      {"etcd_reachable", v.etcd_reachable},
      {"revision", v.revision},
      {"etcd_history_s", v.etcd_history_s},
      {"compacted_revision", v.compacted_revision},
      {"compaction_held", {{"revision", v.compaction_held_at}, {"by_node", v.compaction_held_by}}},
      {"repair",
       {{"pending", v.repair_pending},
        {"repaired_chunks", v.repaired_chunks},
        {"repaired_bytes", v.repaired_bytes},
        {"failures", v.repair_failures},
        {"passes", v.repair_passes},
        {"bandwidth", v.repair_bandwidth}}},
      {"namespace",
       {{"transactions", v.ns_transactions},
        {"changes", v.ns_changes},
        {"conflicts", v.ns_conflicts},
        {"names_taken_over", v.ns_names_taken_over},
        {"refused_unreachable", v.ns_refused_unreachable}}},
      {"nodes", nodes}};
}

Result<nlohmann::json> Control::LocationJson(uint64_t ino) {
  KVFS_ASSIGN_OR_RETURN(ObjectRecord rec, ns_->Record(ino));
  if (rec.type != ObjectType::kFile) return Status::Error(ENODATA, "only files have chunks");
  const PlacementView p = store_->Placement(rec.layout);
  const ClusterView v = store_->Cluster();
  nlohmann::json holders = nlohmann::json::array();
  for (uint16_t id : p.holders) {
    std::string address, state = "down";
    for (const NodeView& n : v.nodes) {
      if (n.id != id) continue;
      address = n.address;
      state = n.state;
    }
    holders.push_back({{"id", id}, {"address", address}, {"state", state}});
  }
  char chunk[17] = "";
  if (p.chunk)
    std::snprintf(chunk, sizeof chunk, "%016llx", static_cast<unsigned long long>(p.chunk));
  return nlohmann::json{{"chunk_key", chunk}, {"local", p.local}, {"holders", holders}};
}

Result<std::string> Control::GetXattr(uint64_t ino, std::string_view name) {
  if (name == "user.kvfs.verify") return Verify(ino);  // reads every byte of the file
  if (name == "user.kvfs.location") {
    KVFS_ASSIGN_OR_RETURN(nlohmann::json location, LocationJson(ino));
    return JsonText(location);
  }
  if (name == "user.kvfs.checksum") return Checksum(ino);
  if (name != "user.kvfs.stat" && name != "user.kvfs.id" && name != "user.kvfs.state")
    return Status::Error(ENODATA, "no such attribute");
  KVFS_ASSIGN_OR_RETURN(nlohmann::json stat, FileStatJson(ino));
  if (name == "user.kvfs.id") return std::to_string(stat["id"].get<uint64_t>());
  if (name == "user.kvfs.state") return stat["state"].get<std::string>();
  return JsonText(stat);
}

Result<std::string> Control::Checksum(uint64_t ino) {
  KVFS_ASSIGN_OR_RETURN(ObjectRecord rec, ns_->Record(ino));
  if (rec.type != ObjectType::kFile) return Status::Error(ENODATA, "only files have a checksum");
  // The store derives it from checksums it already keeps: no data is read.
  KVFS_ASSIGN_OR_RETURN(uint64_t digest, store_->ContentChecksum(rec.layout));
  return "xxh3:" + Hex64(digest);
}

Result<std::string> Control::Verify(uint64_t ino) {
  KVFS_ASSIGN_OR_RETURN(ObjectRecord rec, ns_->Record(ino));
  // A failure drops the chunk (the store tells the namespace); the caller sees EIO.
  if (rec.type == ObjectType::kFile) KVFS_RETURN_IF_ERROR(store_->Verify(rec.layout));
  return std::string("ok");
}

}  // namespace kvfs::fs
