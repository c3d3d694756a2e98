// ChunkReader: reads one published version for one open file, handing out verified bytes in
// the store's own buffers (no copy into a caller buffer), so the fs layer can splice them into
// the FUSE reply. A store may read ahead of a sequential reader.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kvfs/status.h"

namespace kvfs {

// Bytes [offset, offset + size) of a version as spans of buffers that stay valid and unchanged
// while the view (its `holds`) lives. Every byte was checksum-verified.
struct ReadView {
  std::vector<iovec> spans;
  size_t size = 0;
  std::vector<std::shared_ptr<const void>> holds;
};

// Thread-safe: FUSE serves several READs of one open file at once.
class ChunkReader {
 public:
  virtual ~ChunkReader() = default;
  // Clipped to the version's size (an empty view at or past the end). Errors are final (there
  // is no second path to retry on): bytes that fail their checksum give a Corruption status
  // after the store dropped the record, counted and told its listener; a failed device or peer
  // read gives EIO once every copy was tried.
  virtual Result<ReadView> Read(uint64_t offset, size_t len) = 0;
  // A hint that [offset, offset + len) is about to be read: a store may start fetching it now,
  // so that the first Read finds it on its way. It does not wait for the data; whatever goes
  // wrong is left for Read, which tries again what failed.
  virtual void Prefetch(uint64_t offset, size_t len) {
    (void)offset;
    (void)len;
  }
};

}  // namespace kvfs
