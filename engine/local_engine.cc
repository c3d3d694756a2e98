// LocalEngine: the ChunkStore on local devices. This file holds the engine's life cycle (open,
// recovery into the index, close), id allocation and stats; Apply with its group-commit thread
// is in local_engine_commit.cc, writers and reads in local_engine_read.cc (the class itself is
// in local_engine_impl.h). The pieces it drives live beside it: Device, IoRing,
// DeviceSpace/ExtentAllocator, SegmentCodec, EngineChunkWriter, Journal, Checkpoint, Recovery,
// Index.
#include "kvfs/local_engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

#include "byte_io.h"
#include "local_engine_impl.h"
#include "record_codec.h"

namespace kvfs {
namespace {

constexpr uint64_t kIdBlock = 1 << 16;  // ids reserved per watermark record

Status ValidateOptions(FileSystem& fs, const EngineOptions& o) {
  if (o.data_dir.empty()) return Status::Invalid("engine needs a data directory");
  if (o.segment_size < 4096 || o.segment_size % 4096 != 0 || o.segment_size > (64u << 20)) {
    return Status::Invalid("segment size must be a multiple of 4 KiB between 4 KiB and 64 MiB");
  }
  if (o.queue_depth < 1 || o.queue_depth > 1024) {
    return Status::Invalid("queue depth must be between 1 and 1024");
  }
  if (o.devices.size() > 4096) return Status::Invalid("too many devices");
  // Eviction policy and watermarks, before anything is created on disk.
  if (auto ev = EngineEviction::Make(o); !ev.ok()) return ev.status();
  if (o.devices.empty() && o.capacity == 0) {
    // Only a problem for a new engine; an existing device keeps its size.
    if (!fs.Open(o.data_dir + "/device0.kvfs", {}).ok()) {
      return Status::Invalid("engine needs a capacity for its default device");
    }
  }
  return Status::Ok();
}

}  // namespace

LocalEngineImpl::~LocalEngineImpl() {
  if (ctx_) {
    ctx_->SetReclaimer(nullptr);          // writers that outlive the engine get ENOSPC
    ctx_->SetCorruptionHandler(nullptr);  // readers that outlive it only fail their read
  }
  if (committer_.joinable()) {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    committer_.join();
  }
  std::vector<LayoutRef> dropped;
  {
    std::lock_guard lock(mu_);
    index_.Clear(&dropped);
  }
  dropped.clear();
  journal_.reset();
  if (ctx_) ctx_->Close();
  // Idle rings hold the device files registered: they go with the engine.
  if (read_ahead_) read_ahead_->DropIdleRings();
  lock_.reset();  // releases the flock
}

Status LocalEngineImpl::Start(RecoveredState state, std::vector<std::unique_ptr<Device>> devices) {
  KVFS_ASSIGN_OR_RETURN(eviction_, EngineEviction::Make(options_));
  ctx_ = std::make_shared<EngineContext>(options_, std::move(devices));
  read_ahead_ = std::make_shared<ReadAheadPool>(ctx_->ring_config().buffer_bytes);
  // Rebuild free space from the recovered layouts; a record whose extents are impossible is
  // dropped (and logged) rather than allowed to corrupt others: kvfs is a cache.
  std::vector<LayoutRef> unused;
  size_t dropped_records = 0;
  // Newest changes claim their extents first: should damage have brought back an old record
  // whose extents a newer one reuses, the old one is the one dropped.
  std::vector<RecoveredState::Entry*> order;
  order.reserve(state.records.size());
  for (auto& [id, entry] : state.records) order.push_back(&entry);
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    return a->sequence != b->sequence ? a->sequence > b->sequence : a->record.id > b->record.id;
  });
  for (RecoveredState::Entry* e : order) {
    RecoveredState::Entry& entry = *e;
    const ObjectId id = entry.record.id;
    ObjectRecord rec = std::move(entry.record);
    if (entry.layout) {
      Status st;
      size_t claimed = 0;
      for (const Segment& seg : entry.layout->segments) {
        st = ctx_->space().Claim(seg);
        if (!st.ok()) break;
        ++claimed;
      }
      if (!st.ok()) {
        for (size_t i = 0; i < claimed; ++i) ctx_->space().Release(entry.layout->segments[i]);
        spdlog::error("engine: dropping recovered object {} ('{}'): {}", id, rec.name,
                      st.message());
        ++dropped_records;
        continue;
      }
      rec.layout = ctx_->space().Adopt(std::make_unique<Layout>(std::move(*entry.layout)));
    }
    index_.Put(std::move(rec), &unused);
  }
  next_id_ = state.next_id;
  id_limit_ = state.next_id;
  eviction_->Recover(*fs_, options_.data_dir, index_.Snapshot());
  ctx_->SetReclaimer(
      [this](uint64_t needed, bool may_evict) { return Reclaim(needed, may_evict); });
  ctx_->SetCorruptionHandler(
      [this](const LayoutRef& layout, const Status& why) { DropCorrupt(layout, why); });
  KVFS_ASSIGN_OR_RETURN(std::unique_ptr<Journal> journal,
                        Journal::OpenForAppend(*fs_, options_.data_dir, state.journal_number,
                                               state.journal_valid_bytes));
  AdoptJournal(std::move(journal));
  KVFS_RETURN_IF_ERROR(fs_->SyncDir(options_.data_dir));
  damage_ = std::move(state.damage);
  for (const auto& d : ctx_->devices()) {
    if (!d->superblock_repaired()) continue;
    ++damage_.superblocks;
    damage_.notes.push_back(d->path() + ": superblock restored from its backup copy");
  }
  spdlog::info("engine: opened {} ({} devices, {} objects, {} journal records replayed{}{})",
               options_.data_dir, ctx_->devices().size(), index_.objects(), state.replayed_records,
               state.truncated ? ", torn tail cut" : "",
               dropped_records ? ", some records dropped" : "");
  committer_ = std::thread([this] { CommitLoop(); });
  if (damage_.journal_records > 0 || damage_.checkpoints > 0) {
    // Start the next recovery from what this one made of the damage: a fresh checkpoint, so
    // the damaged bytes are not read (and reported) again. Best effort: without room for it
    // the journals still describe the same state.
    if (Status st = Sync(); !st.ok()) {
      spdlog::warn("engine: no checkpoint after the damaged recovery: {}", st.ToString());
    }
  }
  if (damage_.any()) {
    spdlog::error(
        "engine: {} was damaged: {} journal records, {} checkpoints, {} superblocks (see "
        "the errors above; kvfsctl verify reports it)",
        options_.data_dir, damage_.journal_records, damage_.checkpoints, damage_.superblocks);
  }
  return Status::Ok();
}

std::vector<ObjectRecord> LocalEngineImpl::Records() const {
  std::lock_guard lock(mu_);
  return index_.Snapshot();
}

ObjectId LocalEngineImpl::NewId() {
  const ObjectId id = next_id_.fetch_add(1);
  if (id < id_limit_.load()) return id;  // the common case: no lock
  std::lock_guard lock(mu_);
  if (id >= id_limit_.load()) {
    // Persist a watermark before ids past it are used, so a restart never hands them out
    // again. Not waited for: an id is only visible through a record journaled after it.
    id_limit_ = id + kIdBlock;
    std::string payload, encoded;
    ByteWriter(&payload).U64(id_limit_.load());
    Journal::EncodeRecord(RecordType::kWatermark, payload, &encoded);
    Enqueue(std::move(encoded), {});
    work_cv_.notify_one();
  }
  return id;
}

StoreStats LocalEngineImpl::Stats() const {
  StoreStats s;
  s.capacity_bytes = ctx_->space().capacity_bytes();
  s.used_bytes = ctx_->space().used_bytes();
  {
    std::lock_guard lock(mu_);
    // With durability=async an unlink's extents free at the next group commit; they are no
    // one's any more, so statvfs counts them free as soon as the unlink returns (a writer
    // that needs them flushes the commit first: Reclaim).
    const uint64_t queued_free = QueuedFreeBytes() + committing_free_.load();
    s.used_bytes = s.used_bytes > queued_free ? s.used_bytes - queued_free : 0;
    s.logical_bytes = index_.logical_bytes();
    s.objects = index_.objects();
    s.files = index_.files();
    s.stored_bytes = index_.stored_bytes();
    if (!commit_error_.ok()) s.read_only = ReadOnlyError().message();
  }
  EngineCounters& c = ctx_->counters();
  s.reads = c.reads.load();
  s.writes = c.writes.load();
  s.bytes_read = c.bytes_read.load();
  s.bytes_written = c.bytes_written.load();
  s.checksum_failures = c.checksum_failures.load();
  s.corrupt_dropped = corrupt_dropped_.load();
  s.evictions = c.evictions.load();
  if (read_ahead_) {
    s.readahead_hits = read_ahead_->hits.load();
    s.readahead_misses = read_ahead_->misses.load();
    s.readahead_wasted = read_ahead_->wasted.load();
  }
  s.eviction_policy = std::string(eviction_->policy_name());
  s.high_watermark = eviction_->high_watermark();
  s.low_watermark = eviction_->low_watermark();
  s.journal_bytes = journal_bytes_.load();
  s.journal_commits = journal_commits_.load();
  s.segment_size = options_.segment_size;
  for (const auto& d : ctx_->devices()) s.devices.push_back(d->path());
  s.recovery_damaged_records = damage_.journal_records;
  s.recovery_damaged_checkpoints = damage_.checkpoints;
  s.recovery_repaired_superblocks = damage_.superblocks;
  s.recovery_notes = damage_.notes;
  return s;
}

Result<std::unique_ptr<LocalEngine>> LocalEngine::Open(const EngineOptions& options) {
  std::shared_ptr<FileSystem> fs = options.file_system ? options.file_system : FileSystem::Posix();
  KVFS_RETURN_IF_ERROR(ValidateOptions(*fs, options));
  KVFS_RETURN_IF_ERROR(fs->MakeDirs(options.data_dir));
  const std::string lock_path = options.data_dir + "/LOCK";
  auto lock = fs->Lock(lock_path);
  if (!lock.ok()) {
    if (lock.status().err() == EBUSY) {
      return Status::Error(EBUSY, "data directory " + options.data_dir +
                                      " is in use by another kvfs engine (" + lock_path +
                                      " is locked)");
    }
    return lock.status();
  }
  auto engine = std::make_unique<LocalEngineImpl>(options, fs, std::move(lock).value());
  KVFS_ASSIGN_OR_RETURN(RecoveredState state, Recover(*fs, options.data_dir));
  KVFS_ASSIGN_OR_RETURN(auto devices, OpenDevices(*fs, options, state.fresh));
  KVFS_RETURN_IF_ERROR(engine->Start(std::move(state), std::move(devices)));
  FinishFirstStart(*fs, options.data_dir);
  return std::unique_ptr<LocalEngine>(std::move(engine));
}

}  // namespace kvfs
