#include "remote_base_writer.h"

namespace kvfs::cluster {

Status RemoteBaseWriter::CopyBase() {
  if (inner_) return Status::Ok();
  // A failed copy (no holder answered) leaves nothing behind: the next operation tries again.
  KVFS_ASSIGN_OR_RETURN(inner_, copy_base_());
  return Status::Ok();
}

Status RemoteBaseWriter::Write(uint64_t offset, const void* data, size_t len) {
  KVFS_RETURN_IF_ERROR(CopyBase());
  return inner_->Write(offset, data, len);
}

Result<size_t> RemoteBaseWriter::Read(uint64_t offset, void* out, size_t len) {
  KVFS_RETURN_IF_ERROR(CopyBase());
  return inner_->Read(offset, out, len);
}

Status RemoteBaseWriter::Truncate(uint64_t size) {
  if (!inner_ && size == 0) {
    // Nothing of the base survives: start empty instead of fetching it.
    KVFS_ASSIGN_OR_RETURN(inner_, empty_());
    replaced_ = base_size_ != 0;
    return Status::Ok();
  }
  KVFS_RETURN_IF_ERROR(CopyBase());
  return inner_->Truncate(size);
}

Result<LayoutRef> RemoteBaseWriter::Finish() {
  KVFS_RETURN_IF_ERROR(CopyBase());
  return inner_->Finish();
}

}  // namespace kvfs::cluster
