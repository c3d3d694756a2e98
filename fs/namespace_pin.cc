// Namespace::SetPinned: user.kvfs.pin. The pin is the record's kFlagPinned, journaled like any
// other attribute change, so it survives a restart; the store's eviction policy follows the
// flag of every record it is given.
#include "namespace.h"

namespace kvfs::fs {

Status Namespace::SetPinned(uint64_t ino, bool pinned) {
  MetaBatch batch;
  uint64_t ticket = 0;
  {
    std::lock_guard lock(mu_);
    Inode* in = Find(ino);
    if (!in) return Status::NotFound("no such inode");
    if (in->rec.type != ObjectType::kFile) return Status::Invalid("only files can be pinned");
    const uint32_t flags =
        pinned ? (in->rec.flags | kFlagPinned) : (in->rec.flags & ~uint32_t{kFlagPinned});
    if (flags == in->rec.flags) return Status::Ok();
    if (in->journaled && in->linked) KVFS_RETURN_IF_ERROR(store_->CheckWritable());
    in->rec.flags = flags;
    // Not published yet: the flag goes to the store with the publish.
    if (!in->journaled || !in->linked) return Status::Ok();
    batch.puts.push_back(RecordOf(in));
    ticket = TakeTicket(batch);
  }
  return ApplyInOrder(ticket, batch);
}

}  // namespace kvfs::fs
