#include "index_undo.h"

namespace kvfs {

IndexUndo IndexUndo::Capture(const Index& index, const MetaBatch& batch) {
  IndexUndo undo;
  auto remember = [&](ObjectId id) {
    // The state before the whole batch: a batch may remove and re-put one id.
    for (const auto& [seen, rec] : undo.before_)
      if (seen == id) return;
    const ObjectRecord* rec = index.Find(id);
    undo.before_.emplace_back(id, rec ? std::optional<ObjectRecord>(*rec) : std::nullopt);
  };
  for (ObjectId id : batch.removes) remember(id);
  for (const ObjectRecord& rec : batch.puts) remember(rec.id);
  return undo;
}

void IndexUndo::Restore(
    Index* index, std::vector<LayoutRef>* dropped,
    std::vector<std::pair<ObjectId, std::optional<ObjectRecord>>>* changed) const {
  for (const auto& [id, rec] : before_) {
    if (rec) {
      index->Put(*rec, dropped);
    } else {
      MetaBatch remove;
      remove.removes.push_back(id);
      index->Apply(remove, dropped);
    }
    changed->emplace_back(id, rec);
  }
}

}  // namespace kvfs
