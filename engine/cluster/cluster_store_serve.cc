// ClusterStore as the RequestHandler of its peer server: GET of a held chunk's bytes, PUT of a
// chunk this node is to hold (placement and repair), STATS.
#include <spdlog/spdlog.h>

#include "cluster_store.h"

namespace kvfs::cluster {

Result<wire::GetReply> ClusterStore::Get(const wire::GetRequest& req, std::span<uint8_t> out,
                                         std::vector<DataDigest>* digests) {
  const uint64_t chunk = ParseChunkName(req.key);
  if (chunk == 0) return Status::Invalid("not a chunk id: " + req.key.substr(0, 64));
  LayoutRef held = HeldLayout(chunk);
  if (!held) return Status::NotFound("chunk " + req.key + " is not held here");
  wire::GetReply reply;
  reply.object_size = held->size;
  // A peer's read from the start of the chunk is one access, as an open is for a local reader
  // (fuse_ops OnOpen): its holder keeps the chunk by how often any node reads it. A later piece
  // of the same read is not another access. Repair's and verify's copies start at 0 too, and
  // count as a read of the chunk.
  if (req.offset == 0) TouchHeld(chunk, kPeerReadStream);
  if (req.offset >= held->size) return reply;
  const size_t want =
      static_cast<size_t>(std::min<uint64_t>({req.length, out.size(), held->size - req.offset}));
  if (digests) {
    // The engine's segment checksums travel with the bytes: the receiver checks them, and a
    // receiver whose check fails asks again without digests, so that Read below checks here
    // and drops a copy that is corrupt.
    Result<size_t> n = local_->ReadForPeer(held, req.offset, out.data(), want, digests);
    if (n.ok()) {
      reply.length = *n;
      return reply;
    }
    if (n.status().err() != EOPNOTSUPP) return n.status();
    digests->clear();  // a store without the path: a checked read, digested by the server
  }
  size_t done = 0;
  while (done < want) {
    // A corrupt copy fails here, and the engine drops it (this node then leaves its holder list).
    KVFS_ASSIGN_OR_RETURN(size_t n,
                          local_->Read(held, req.offset + done, out.data() + done, want - done));
    if (n == 0) break;
    done += n;
  }
  reply.length = done;
  return reply;
}

Result<wire::PutReply> ClusterStore::Put(const wire::PutRequest& req,
                                         std::span<const uint8_t> data) {
  const uint64_t chunk = ParseChunkName(req.key);
  if (chunk == 0) return Status::Invalid("not a chunk id: " + req.key.substr(0, 64));
  if (LayoutRef held = HeldLayout(chunk); held && held->size == data.size()) {
    return wire::PutReply{chunk, 0};  // a retried PUT: already here
  }
  KVFS_ASSIGN_OR_RETURN(std::unique_ptr<ChunkWriter> w, local_->NewWriter(nullptr));
  if (!data.empty()) KVFS_RETURN_IF_ERROR(w->Write(0, data.data(), data.size()));
  KVFS_ASSIGN_OR_RETURN(LayoutRef layout, w->Finish());
  KVFS_RETURN_IF_ERROR(Hold(chunk, layout, 0));
  return wire::PutReply{chunk, 0};
}

}  // namespace kvfs::cluster
