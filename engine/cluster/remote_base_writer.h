// RemoteBaseWriter: a writer whose base version is held only by other nodes. The base is copied
// here when an operation first needs its bytes, not when the writer is made: the fs makes
// writers at open, under its namespace lock, where a frozen holder would stall every operation
// of the node for a request timeout; and a rewrite (open, then O_TRUNC's truncate to 0) needs
// none of the base's bytes at all.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "kvfs/chunk_store.h"

namespace kvfs::cluster {

class RemoteBaseWriter final : public ChunkWriter {
 public:
  using MakeWriter = std::function<Result<std::unique_ptr<ChunkWriter>>()>;
  // `copy_base` returns a local writer started from a copy of the base; `empty` a local writer
  // with no base.
  RemoteBaseWriter(uint64_t base_size, MakeWriter copy_base, MakeWriter empty)
      : base_size_(base_size), copy_base_(std::move(copy_base)), empty_(std::move(empty)) {}

  Status Write(uint64_t offset, const void* data, size_t len) override;
  Result<size_t> Read(uint64_t offset, void* out, size_t len) override;
  Status Truncate(uint64_t size) override;
  uint64_t size() const override { return inner_ ? inner_->size() : base_size_; }
  bool dirty() const override { return inner_ && (replaced_ || inner_->dirty()); }
  Result<LayoutRef> Finish() override;

  // Whether the base has been copied or dropped (tests).
  bool materialized() const { return inner_ != nullptr; }

 private:
  Status CopyBase();

  const uint64_t base_size_;
  MakeWriter copy_base_, empty_;
  std::unique_ptr<ChunkWriter> inner_;
  bool replaced_ = false;  // the base was dropped whole (truncated to 0) instead of copied
};

}  // namespace kvfs::cluster
