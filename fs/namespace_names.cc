// The names a change moves in a shared namespace (MetaBatch::names).
//
// A cluster keeps one key per name beside the records, so that two nodes cannot both take a
// name (O_EXCL, mkdir, link, RENAME_NOREPLACE) and a directory cannot go while another node adds
// to it. The fs therefore tells the store, for every batch, which names change hands: each
// change notes the inodes it touches before touching them, and FinishNames compares their stored
// names before and after. Only names the store holds count: an inode that is not journaled has
// none there (a file still being written gets its names at its first publish).
//
// A directory moving to another parent also lists that parent's ancestors as they are here
// (NoteAncestors): the check that it does not move below itself holds only while they stay.
#include <algorithm>
#include <map>

#include "namespace.h"

namespace kvfs::fs {
namespace {

bool Contains(const std::vector<kvfs::Link>& names, const kvfs::Link& l) {
  return std::any_of(names.begin(), names.end(),
                     [&](const kvfs::Link& n) { return n.parent == l.parent && n.name == l.name; });
}

}  // namespace

void Namespace::NoteNames(NameLedger& ledger, const Inode* in) const {
  if (!shared_ || !in) return;
  for (const auto& [id, names] : ledger)
    if (id == in->rec.id) return;  // the first note is the state before the change
  ledger.emplace_back(in->rec.id, StoredNames(in));
}

std::vector<kvfs::Link> Namespace::StoredNames(const Inode* in) const {
  if (!in || !in->journaled || !in->linked) return {};
  return NamesOf(in);
}

void Namespace::FinishNames(const NameLedger& ledger, MetaBatch* batch) {
  if (!shared_) return;
  std::map<std::pair<uint64_t, std::string>, NameChange> changes;
  auto at = [&](const kvfs::Link& l) -> NameChange& {
    NameChange& c = changes[{l.parent, l.name}];
    c.parent = l.parent;
    c.name = l.name;
    return c;
  };
  for (const auto& [id, before] : ledger) {
    const std::vector<kvfs::Link> after = StoredNames(Find(id));
    for (const kvfs::Link& l : before)
      if (!Contains(after, l)) at(l).from = id;
    for (const kvfs::Link& l : after)
      if (!Contains(before, l)) at(l).to = id;
  }
  for (auto& [key, change] : changes) batch->names.push_back(std::move(change));
}

void Namespace::NoteAncestors(Inode* dir, MetaBatch* batch) {
  if (!shared_) return;
  // The root never moves; a directory deeper than the tree's depth would be a cycle already.
  for (Inode* p = dir; p && p->rec.id != kRootId && batch->unchanged.size() <= inodes_.size();
       p = Find(p->rec.parent))
    batch->unchanged.emplace_back(p->rec.id, p->rec.revision);
}

}  // namespace kvfs::fs
