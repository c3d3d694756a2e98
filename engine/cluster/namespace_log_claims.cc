// NamespaceLog, what a refused transaction may take over before it is tried again: a name key
// missing while its record names it (ClaimUnkeyedNames), a name another node's record holds
// (Displace). Split from namespace_log.cc, which sends the transactions.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "namespace_log.h"
#include "record_value.h"

namespace kvfs::cluster {

Result<bool> NamespaceLog::Unkeyed(ObjectId id, const Link& name) {
  etcd::RangeRequest r;
  r.key = keys_->Name(name.parent, name.name);
  KVFS_ASSIGN_OR_RETURN(etcd::RangeResponse held, etcd_->Range(r));
  if (!held.kvs.empty()) return false;
  KVFS_ASSIGN_OR_RETURN(std::unique_ptr<ObjectRecord> rec, ReadRecord(id));
  if (!rec) return false;
  const std::vector<Link> names = rec->links();
  // A name etcd never gave the object (the fs shows a refused change): the reset settles it.
  if (std::find(names.begin(), names.end(), name) == names.end()) return false;
  spdlog::warn(
      "cluster: record {:x} names '{}' in directory {:x} but the name key is missing; "
      "the change takes the name as free",
      id, name.name, name.parent);
  return true;
}

Result<bool> NamespaceLog::ClaimUnkeyedNames(MetaBatch& batch) {
  std::set<ObjectId> ids;
  for (const auto& put : batch.puts) ids.insert(put.id);
  for (ObjectId id : batch.removes) ids.insert(id);
  std::set<std::string> seen;
  bool claimed = false;
  for (NameChange& c : batch.names) {
    const std::string key = keys_->Name(c.parent, c.name);
    if (!seen.insert(key).second || c.from == kInvalidId || !ids.count(c.from)) continue;
    KVFS_ASSIGN_OR_RETURN(bool unkeyed, Unkeyed(c.from, {c.parent, c.name}));
    if (!unkeyed) continue;
    c.from = kInvalidId;
    claimed = true;
  }
  // The same for a name a put keeps (compared in BuildTxn): taken with the batch.
  std::vector<NameChange> taken;
  for (const ObjectRecord& put : batch.puts) {
    for (const Link& l : KeptNames(put, batch)) {
      KVFS_ASSIGN_OR_RETURN(bool unkeyed, Unkeyed(put.id, l));
      if (unkeyed) taken.push_back({l.parent, l.name, kInvalidId, put.id});
    }
  }
  batch.names.insert(batch.names.end(), taken.begin(), taken.end());
  return claimed || !taken.empty();
}

Result<bool> NamespaceLog::Displace(MetaBatch& batch, const NameChange& change, ObjectId holder) {
  for (const auto& put : batch.puts) {
    if (put.id == holder) return false;  // the batch changes the holder itself: not for us
  }
  KVFS_ASSIGN_OR_RETURN(std::unique_ptr<ObjectRecord> rec, ReadRecord(holder));
  auto take_from_holder = [&] {
    for (NameChange& c : batch.names) {
      if (c.parent == change.parent && c.name == change.name && c.from == kInvalidId)
        c.from = holder;
    }
  };
  if (!rec) {
    // The holder's record is gone. Its removal also removes its names, so the next attempt
    // usually finds the name free; a name key left without its record (nothing else would ever
    // clear it, and every publish to that name would be refused for good) is taken over: the
    // batch compares the name with that holder and overwrites it.
    spdlog::info("cluster: '{}' in directory {:x} names record {:x}, which is gone: taken over",
                 change.name, change.parent, holder);
    take_from_holder();
    return true;
  }
  // A new directory, and an exclusive change, do not take a name a live record holds.
  if (batch.exclusive) return false;
  for (const auto& put : batch.puts) {
    if (put.id == change.to && put.type == ObjectType::kDirectory) return false;
  }
  if (rec->type == ObjectType::kDirectory) return false;
  // Take the name out of the holder's record: the record goes on with its other names, or
  // goes when it had no other.
  std::vector<Link> names = rec->links();
  std::erase_if(names,
                [&](const Link& l) { return l.parent == change.parent && l.name == change.name; });
  if (names.empty()) {
    batch.removes.push_back(holder);
    batch.remove_revisions.push_back(rec->revision);
  } else {
    rec->parent = names[0].parent;
    rec->name = names[0].name;
    rec->extra_links.assign(names.begin() + 1, names.end());
    batch.puts.push_back(*rec);
  }
  take_from_holder();
  spdlog::info("cluster: '{}' in directory {:x} taken over from record {:x}", change.name,
               change.parent, holder);
  return true;
}

}  // namespace kvfs::cluster
