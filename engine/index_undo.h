// IndexUndo: the records one batch replaced or removed, as they were before it, so a batch whose
// journal write failed can be taken back out of the in-memory index. After a failed commit the
// engine restores every batch that never became durable (newest first) and the index again says
// exactly what the disk says; the store then refuses further changes (read-only).
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "index.h"

namespace kvfs {

class IndexUndo {
 public:
  // Call before index.Apply(batch): remembers the current state of every id the batch touches.
  static IndexUndo Capture(const Index& index, const MetaBatch& batch);
  // Puts every touched id back as it was. Layouts the index lets go of are appended to
  // `dropped`; the ids whose record vanished or changed are appended to `changed`.
  void Restore(Index* index, std::vector<LayoutRef>* dropped,
               std::vector<std::pair<ObjectId, std::optional<ObjectRecord>>>* changed) const;
  bool empty() const { return before_.empty(); }
  // Calls `fn` with each layout a before-image holds (references this undo owns).
  template <typename Fn>
  void ForEachLayout(Fn&& fn) const {
    for (const auto& [id, rec] : before_) {
      if (rec && rec->layout) fn(rec->layout);
    }
  }

 private:
  std::vector<std::pair<ObjectId, std::optional<ObjectRecord>>> before_;
};

}  // namespace kvfs
