// NamespaceLog, commit side: the queue, group commit, transactions with their compares, and what
// a refused transaction leads to. The watch side is in namespace_watch.cc, the resets in
// namespace_resets.cc.
#include "namespace_log.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "record_value.h"

namespace kvfs::cluster {
namespace {

using etcd::Compare;
using etcd::TxnOp;

constexpr int kAttempts = 6;  // displacements of names other nodes took meanwhile
constexpr auto kRebaseKeep = std::chrono::seconds(60);

Compare ModIs(const std::string& key, int64_t rev) {
  return {key, "", Compare::Target::kModRevision, Compare::Op::kEqual, rev, ""};
}

size_t OpCount(const etcd::TxnRequest& t) { return std::max(t.compare.size(), t.success.size()); }

// Two batches of one group checking the same thing (that their directory still exists) send
// that compare once.
std::string CompareIdentity(const etcd::Compare& c) {
  return c.key + '\0' + c.range_end + '\0' + std::to_string(static_cast<int>(c.target)) + '\0' +
         std::to_string(static_cast<int>(c.op)) + '\0' + std::to_string(c.number) + '\0' + c.value;
}

}  // namespace

std::vector<Link> NamespaceLog::KeptNames(const ObjectRecord& rec, const MetaBatch& batch) {
  std::vector<Link> kept;
  for (const Link& l : rec.links()) {
    if (kept.size() == kKeptNameCompares) break;
    const bool moved =
        std::any_of(batch.names.begin(), batch.names.end(),
                    [&](const NameChange& c) { return c.parent == l.parent && c.name == l.name; });
    if (!moved) kept.push_back(l);
  }
  return kept;
}

NamespaceLog::NamespaceLog(etcd::Client* etcd, const NamespaceKeys* keys,
                           NamespaceLogOptions options, NamespaceLogHooks hooks)
    : etcd_(etcd), keys_(keys), options_(options), hooks_(std::move(hooks)) {}

NamespaceLog::~NamespaceLog() { Stop(); }

void NamespaceLog::Stop() {
  if (stop_.exchange(true)) return;
  interrupt_watch_ = true;
  {
    std::lock_guard lock(mu_);
    queue_cv_.notify_all();
    in_flight_cv_.notify_all();
    resetting_cv_.notify_all();
  }
  applied_cv_.notify_all();
  if (commit_.joinable()) commit_.join();
  if (watch_.joinable()) watch_.join();
  std::lock_guard lock(mu_);
  for (auto& p : queue_) {
    p->done = true;
    p->status = Status::Error(ESHUTDOWN, "cluster store is shutting down");
  }
  queue_.clear();
  done_cv_.notify_all();
}

void NamespaceLog::Start() {
  if (started_) return;
  started_ = true;
  commit_ = std::thread([this] { CommitLoop(); });
  watch_ = std::thread([this] { WatchLoop(); });
}

NamespaceLog::Counters NamespaceLog::counters() const {
  std::lock_guard lock(mu_);
  return counters_;
}

Result<uint64_t> NamespaceLog::Submit(MetaBatch batch) {
  std::promise<Result<MetaBatch>> ready;
  ready.set_value(std::move(batch));
  return Submit(ready.get_future().share());
}

Result<uint64_t> NamespaceLog::Submit(std::shared_future<Result<MetaBatch>> batch) {
  if (stop_.load()) return Status::Error(ESHUTDOWN, "cluster store is shutting down");
  if (hooks_.writable && !hooks_.writable()) {
    std::lock_guard lock(mu_);
    ++counters_.refused_unreachable;
    return Status::Error(EROFS,
                         "etcd is unreachable: namespace changes are refused until it is back");
  }
  auto p = std::make_shared<Pending>();
  p->future = std::move(batch);
  std::lock_guard lock(mu_);
  p->token = next_token_++;
  queue_.push_back(p);
  by_token_[p->token] = p;
  queue_cv_.notify_one();
  return p->token;
}

Result<NamespaceLog::Done> NamespaceLog::Await(uint64_t token) {
  std::unique_lock lock(mu_);
  auto it = by_token_.find(token);
  if (it == by_token_.end()) return Status::Invalid("unknown commit token");
  std::shared_ptr<Pending> p = it->second;
  done_cv_.wait(lock, [&] { return p->done; });
  by_token_.erase(token);
  if (!p->status.ok()) return p->status;
  return Done{p->revision, std::move(p->batch)};
}

void NamespaceLog::Finish(Pending& p, Status st, int64_t revision) {
  std::lock_guard lock(mu_);
  p.status = std::move(st);
  p.revision = revision;
  p.done = true;
  done_cv_.notify_all();
}

void NamespaceLog::CommitLoop() {
  while (!stop_.load()) {
    std::vector<std::shared_ptr<Pending>> group;
    {
      std::unique_lock lock(mu_);
      queue_cv_.wait(lock, [&] { return stop_.load() || !queue_.empty(); });
      if (stop_.load()) return;
      group.push_back(queue_.front());
      queue_.pop_front();
    }
    // The first batch in its turn: wait for its preparation (chunk placement) to finish.
    Result<MetaBatch> first = group[0]->future.get();
    if (!first.ok()) {
      Finish(*group[0], first.status(), 0);
      continue;
    }
    group[0]->batch = std::move(*first);
    // Batches queued behind it that are ready join it while their keys do not overlap.
    etcd::TxnRequest probe;
    TxnKeys keys;
    if (Status st = BuildTxn(group[0]->batch, &probe, &keys); !st.ok()) {
      Finish(*group[0], st, 0);
      continue;
    }
    size_t ops = OpCount(probe);
    for (;;) {
      std::shared_ptr<Pending> next;
      {
        std::lock_guard lock(mu_);
        if (queue_.empty()) break;
        next = queue_.front();
        if (next->future.wait_for(std::chrono::seconds(0)) != std::future_status::ready) break;
      }
      Result<MetaBatch> b = next->future.get();
      if (!b.ok()) break;  // the committer reaches it alone and reports the error
      etcd::TxnRequest t;
      TxnKeys k;
      if (!BuildTxn(*b, &t, &k).ok() || ops + OpCount(t) > options_.max_ops) break;
      if (keys.Overlaps(k)) break;
      keys.Add(k);
      ops += OpCount(t);
      {
        std::lock_guard lock(mu_);
        queue_.pop_front();
      }
      next->batch = std::move(*b);
      group.push_back(std::move(next));
    }
    CommitGroup(group);
  }
}

bool NamespaceLog::TxnKeys::Overlaps(const TxnKeys& other) const {
  auto meets = [](const std::set<std::string>& a, const std::set<std::string>& b) {
    return std::any_of(a.begin(), a.end(), [&](const std::string& k) { return b.count(k) > 0; });
  };
  return meets(writes, other.writes) || meets(writes, other.reads) || meets(reads, other.writes);
}

void NamespaceLog::TxnKeys::Add(const TxnKeys& other) {
  writes.insert(other.writes.begin(), other.writes.end());
  reads.insert(other.reads.begin(), other.reads.end());
}

Status NamespaceLog::BuildTxn(const MetaBatch& batch, etcd::TxnRequest* txn, TxnKeys* keys) {
  std::set<ObjectId> ids;
  for (const auto& p : batch.puts) ids.insert(p.id);
  for (ObjectId id : batch.removes) ids.insert(id);
  auto use = [&](const std::string& k) { keys->writes.insert(k); };
  auto read = [&](const std::string& k) { keys->reads.insert(k); };
  for (const ObjectRecord& rec : batch.puts) {
    if (rec.layout && rec.type == ObjectType::kFile && !AsClusterLayout(rec.layout))
      return Status::Invalid("a record put without a chunk reference");
    const std::string key = keys_->Record(rec.id);
    txn->compare.push_back(ModIs(key, static_cast<int64_t>(Rebase(rec.id, rec.revision))));
    txn->success.push_back(
        {TxnOp::Kind::kPut, key, EncodeRecordValue(rec, options_.self), "", 0, 0});
    txn->failure.push_back({TxnOp::Kind::kRange, key, "", "", 0, 0});
    use(key);
  }
  for (size_t i = 0; i < batch.removes.size(); ++i) {
    const ObjectId id = batch.removes[i];
    const uint64_t rev = i < batch.remove_revisions.size() ? batch.remove_revisions[i] : 0;
    const std::string key = keys_->Record(id);
    txn->compare.push_back(ModIs(key, static_cast<int64_t>(Rebase(id, rev))));
    // A directory goes only while no name is in it (another node may have added one).
    const std::string names = keys_->NamePrefix(id);
    txn->compare.push_back(
        {names, etcd::PrefixEnd(names), Compare::Target::kVersion, Compare::Op::kEqual, 0, ""});
    txn->success.push_back({TxnOp::Kind::kDelete, key, "", "", 0, 0});
    txn->failure.push_back({TxnOp::Kind::kRange, key, "", "", 0, 0});
    use(key);
    read(names);
  }
  for (const auto& [id, rev] : batch.unchanged) {
    if (ids.count(id)) continue;  // put or removed: compared above
    const std::string key = keys_->Record(id);
    txn->compare.push_back(ModIs(key, static_cast<int64_t>(Rebase(id, rev))));
    read(key);
  }
  // Names: the last change of each key wins; a name believed free must be free; a directory
  // receiving a name must still exist.
  std::map<std::string, ObjectId> final_holder;
  std::set<uint64_t> parents;
  std::set<std::string> asked;  // names read back on failure, once each
  std::set<std::string> changed;
  for (const NameChange& c : batch.names) {
    const std::string key = keys_->Name(c.parent, c.name);
    final_holder[key] = c.to;
    use(key);
    // The first change of a key gives its holder before the batch, also when that holder is an
    // object of the batch: its record at the expected revision does not prove the name, since
    // the fs may show it under a name etcd never gave it (a refused rename not reset yet), and
    // a removal built on that would delete another name and leave its own behind.
    const bool first = changed.insert(key).second;
    if (c.from == kInvalidId) {
      txn->compare.push_back({key, "", Compare::Target::kVersion, Compare::Op::kEqual, 0, ""});
      if (asked.insert(key).second)
        txn->failure.push_back({TxnOp::Kind::kRange, key, "", "", 0, 0});
    } else if (first || !ids.count(c.from)) {
      txn->compare.push_back(
          {key, "", Compare::Target::kValue, Compare::Op::kEqual, 0, Hex16(c.from)});
    }
    if (c.to != kInvalidId && c.parent != kRootId && !ids.count(c.parent)) parents.insert(c.parent);
  }
  // A name a put keeps must be its own in etcd. A change built on this node's refused rename
  // or exchange before its reset (a rewrite of the file the tree showed under the refused
  // name) committed a record naming 'a' while etcd gave 'a' to another object and left the
  // record's real name key pointing at it: nodes that read the namespace afresh showed another
  // file than the running ones (a random-exchange script on two nodes, 3 runs in about 70).
  for (const ObjectRecord& rec : batch.puts) {
    for (const Link& l : KeptNames(rec, batch)) {
      const std::string key = keys_->Name(l.parent, l.name);
      txn->compare.push_back(
          {key, "", Compare::Target::kValue, Compare::Op::kEqual, 0, Hex16(rec.id)});
      read(key);
    }
  }
  for (uint64_t parent : parents) {
    const std::string key = keys_->Record(parent);
    txn->compare.push_back({key, "", Compare::Target::kVersion, Compare::Op::kGreater, 0, ""});
    read(key);
  }
  for (const auto& [key, holder] : final_holder) {
    if (holder != kInvalidId) {
      txn->success.push_back({TxnOp::Kind::kPut, key, Hex16(holder), "", 0, 0});
    } else {
      txn->success.push_back({TxnOp::Kind::kDelete, key, "", "", 0, 0});
    }
  }
  if (OpCount(*txn) > options_.max_ops)
    return Status::Error(E2BIG, "a namespace change of " + std::to_string(OpCount(*txn)) +
                                    " operations exceeds one etcd transaction");
  return Status::Ok();
}

uint64_t NamespaceLog::Rebase(ObjectId id, uint64_t rev) const {
  auto it = rebase_.find(id);
  if (it == rebase_.end()) return rev;
  for (int guard = 0; guard < 1000; ++guard) {
    auto step = it->second.find(rev);
    if (step == it->second.end()) break;
    rev = step->second;
  }
  return rev;
}

void NamespaceLog::RecordCommit(const MetaBatch& batch, int64_t revision) {
  if (spdlog::should_log(spdlog::level::debug))
    spdlog::debug("namespace log: committed at revision {}:{}", revision, DescribeBatch(batch));
  const auto now = std::chrono::steady_clock::now();
  auto note = [&](ObjectId id, uint64_t given) {
    rebase_[id][Rebase(id, given)] = static_cast<uint64_t>(revision);
    if (given != Rebase(id, given)) rebase_[id][given] = static_cast<uint64_t>(revision);
    rebase_age_.emplace_back(now, id);
  };
  for (const auto& p : batch.puts) note(p.id, p.revision);
  for (size_t i = 0; i < batch.removes.size(); ++i)
    note(batch.removes[i], i < batch.remove_revisions.size() ? batch.remove_revisions[i] : 0);
  while (!rebase_age_.empty() && now - rebase_age_.front().first > kRebaseKeep) {
    rebase_.erase(rebase_age_.front().second);
    rebase_age_.pop_front();
  }
}

Result<etcd::TxnResponse> NamespaceLog::SendTxn(const etcd::TxnRequest& txn,
                                                const std::vector<const MetaBatch*>& batches) {
  {
    std::lock_guard lock(mu_);
    in_flight_ = true;
    ++txn_started_;
  }
  Result<etcd::TxnResponse> r = etcd_->Txn(txn);
  if (r.ok() && r->succeeded && hooks_.committed) {
    for (const MetaBatch* b : batches)
      if (b->seq != 0) hooks_.committed(b->seq, r->revision);
  }
  {
    std::lock_guard lock(mu_);
    if (r.ok() && r->succeeded) {
      own_revisions_.insert(r->revision);
      for (const MetaBatch* b : batches) RecordCommit(*b, r->revision);
      counters_.txns++;
      counters_.batches += batches.size();
    }
    in_flight_ = false;
    ++txn_done_;
    in_flight_cv_.notify_all();
  }
  return r;
}

void NamespaceLog::CommitGroup(std::vector<std::shared_ptr<Pending>>& group) {
  if (group.size() == 1) {
    CommitOne(*group[0]);
    return;
  }
  etcd::TxnRequest txn;
  TxnKeys keys;
  std::set<std::string> compares;
  for (auto& p : group) {
    etcd::TxnRequest one;
    (void)BuildTxn(p->batch, &one, &keys);  // built once already: cannot fail now
    for (etcd::Compare& c : one.compare)
      if (compares.insert(CompareIdentity(c)).second) txn.compare.push_back(std::move(c));
    txn.success.insert(txn.success.end(), one.success.begin(), one.success.end());
  }
  std::vector<const MetaBatch*> batches;
  for (auto& p : group) batches.push_back(&p->batch);
  Result<etcd::TxnResponse> r = SendTxn(txn, batches);
  if (r.ok() && r->succeeded) {
    for (auto& p : group) Finish(*p, Status::Ok(), r->revision);
    return;
  }
  // Someone's compare failed (or etcd said no): each batch alone finds out which and why.
  for (auto& p : group) CommitOne(*p);
}

void NamespaceLog::FinishUnreachable(Pending& p, const Status& why) {
  NoteRefused(p.batch);  // takes mu_, as Finish does: neither may hold it for the other
  spdlog::error("cluster: etcd unreachable during a namespace change: {}", why.ToString());
  if (hooks_.unreachable) hooks_.unreachable(why);
  Finish(p,
         Status::Error(EROFS, "etcd is unreachable (" + why.message() +
                                  "); the change may not have been made"),
         0);
}

void NamespaceLog::CommitOne(Pending& p) {
  MetaBatch& batch = p.batch;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    etcd::TxnRequest txn;
    TxnKeys keys;
    if (Status st = BuildTxn(batch, &txn, &keys); !st.ok()) return Finish(p, st, 0);
    Result<etcd::TxnResponse> r = SendTxn(txn, {&batch});
    if (!r.ok()) {
      if (etcd::IsUnreachable(r.status())) return FinishUnreachable(p, r.status());
      return Finish(p, r.status(), 0);
    }
    if (r->succeeded) return Finish(p, Status::Ok(), r->revision);

    // Refused. The failure branch read the batch's records, then the names it believed free.
    const size_t records = batch.puts.size() + batch.removes.size();
    int64_t seen = r->revision;
    bool records_moved = false;
    for (size_t i = 0; i < records && i < r->ranges.size(); ++i) {
      const ObjectId id =
          i < batch.puts.size() ? batch.puts[i].id : batch.removes[i - batch.puts.size()];
      const uint64_t given = i < batch.puts.size()
                                 ? batch.puts[i].revision
                                 : (i - batch.puts.size() < batch.remove_revisions.size()
                                        ? batch.remove_revisions[i - batch.puts.size()]
                                        : 0);
      int64_t now = r->ranges[i].kvs.empty() ? 0 : r->ranges[i].kvs[0].mod_revision;
      uint64_t expected;
      {
        std::lock_guard lock(mu_);
        expected = Rebase(id, given);
      }
      if (static_cast<uint64_t>(now) != expected) {
        records_moved = true;
        spdlog::debug("namespace log: record {} is at revision {}, the change expected {}",
                      Hex16(id), now, expected);
      }
    }
    bool displaced = false;
    bool taken_for_good = false;
    size_t range_index = records;
    std::vector<NameChange> changes = batch.names;  // Displace may add to batch.names
    std::set<std::string> asked;
    for (const NameChange& c : changes) {
      if (c.from != kInvalidId) continue;
      const std::string key = keys_->Name(c.parent, c.name);
      if (!asked.insert(key).second) continue;
      if (range_index >= r->ranges.size()) break;
      const etcd::RangeResponse& held = r->ranges[range_index++];
      if (held.kvs.empty()) continue;
      seen = std::max(seen, held.kvs[0].mod_revision);
      auto holder = ParseHex16(held.kvs[0].value);
      if (!holder) continue;
      spdlog::debug("namespace log: name {} is held by {} (revision {})", key, Hex16(*holder),
                    held.kvs[0].mod_revision);
      if (records_moved) {
        taken_for_good = true;
        continue;
      }
      // Exclusive: the name is taken, unless only a name key whose record is gone holds it.
      Result<bool> d = Displace(batch, c, *holder);
      if (!d.ok() && etcd::IsUnreachable(d.status())) return FinishUnreachable(p, d.status());
      if (!d.ok()) return Finish(p, d.status(), 0);
      if (*d) {
        displaced = true;
      } else {
        taken_for_good = true;
      }
    }
    if (displaced && !taken_for_good && !records_moved) {
      std::lock_guard lock(mu_);
      ++counters_.displaced;
      continue;  // the same batch, now also moving the names' holders aside
    }
    if (!displaced && !taken_for_good && !records_moved) {
      Result<bool> healed = ClaimUnkeyedNames(batch);
      if (!healed.ok() && etcd::IsUnreachable(healed.status()))
        return FinishUnreachable(p, healed.status());
      if (healed.ok() && *healed) continue;
    }
    {
      std::lock_guard lock(mu_);
      ++counters_.conflicts;
    }
    if (spdlog::should_log(spdlog::level::debug))
      spdlog::debug("namespace log: refused at revision {}:{}", r->revision, DescribeBatch(batch));
    ResetWork work;
    work.Add(batch);
    if (!ResetTo(work, seen)) return Finish(p, ResetUnanswered(), 0);
    if (taken_for_good && batch.exclusive && !records_moved)
      return Finish(p, Status::Error(EEXIST, "the name was taken on another node"), 0);
    return Finish(p, Status::Conflict("another node changed the namespace meanwhile"), 0);
  }
  ResetWork work;
  work.Add(batch);
  if (!ResetTo(work, 0)) return Finish(p, ResetUnanswered(), 0);
  Finish(p, Status::Conflict("the names kept being taken by other nodes"), 0);
}

Result<std::unique_ptr<ObjectRecord>> NamespaceLog::ReadRecord(ObjectId id) {
  etcd::RangeRequest r;
  r.key = keys_->Record(id);
  KVFS_ASSIGN_OR_RETURN(etcd::RangeResponse got, etcd_->Range(r));
  if (got.kvs.empty()) return std::unique_ptr<ObjectRecord>();
  KVFS_ASSIGN_OR_RETURN(
      RecordValue v,
      DecodeRecordValue(got.kvs[0].value, static_cast<uint64_t>(got.kvs[0].mod_revision)));
  return std::make_unique<ObjectRecord>(std::move(v.record));
}

Result<int64_t> NamespaceLog::CompareAndPut(const ObjectRecord& rec) {
  etcd::TxnRequest txn;
  const std::string key = keys_->Record(rec.id);
  txn.compare.push_back(ModIs(key, static_cast<int64_t>(rec.revision)));
  txn.success.push_back({TxnOp::Kind::kPut, key, EncodeRecordValue(rec, options_.self), "", 0, 0});
  KVFS_ASSIGN_OR_RETURN(etcd::TxnResponse r, etcd_->Txn(txn));
  if (!r.succeeded) return Status::Conflict("record " + Hex16(rec.id) + " changed meanwhile");
  return r.revision;
}

Status NamespaceLog::CompareAndDelete(const ObjectRecord& rec) {
  etcd::TxnRequest txn;
  const std::string key = keys_->Record(rec.id);
  txn.compare.push_back(ModIs(key, static_cast<int64_t>(rec.revision)));
  txn.success.push_back({TxnOp::Kind::kDelete, key, "", "", 0, 0});
  for (const Link& l : rec.links())
    txn.success.push_back({TxnOp::Kind::kDelete, keys_->Name(l.parent, l.name), "", "", 0, 0});
  KVFS_ASSIGN_OR_RETURN(etcd::TxnResponse r, etcd_->Txn(txn));
  if (!r.succeeded) return Status::Conflict("record " + Hex16(rec.id) + " changed meanwhile");
  return Status::Ok();
}

Result<ObjectId> NamespaceLog::HighestId(NodeId node) {
  etcd::RangeRequest r;
  r.key = keys_->Record(static_cast<uint64_t>(node) << 48);
  r.range_end = keys_->Record((static_cast<uint64_t>(node) << 48) | ((uint64_t{1} << 48) - 1));
  r.range_end.push_back('\0');
  r.descending = true;
  r.limit = 1;
  r.keys_only = true;
  KVFS_ASSIGN_OR_RETURN(etcd::RangeResponse got, etcd_->Range(r));
  if (got.kvs.empty()) return ObjectId{0};
  auto id = keys_->ParseRecord(got.kvs[0].key);
  return id ? *id : ObjectId{0};
}

}  // namespace kvfs::cluster
