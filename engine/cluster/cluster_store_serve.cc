// ClusterStore as the RequestHandler of its peer server: GET of a held chunk's bytes, PUT of a
// chunk this node is to hold (placement and repair), STATS.
#include <spdlog/spdlog.h>

#include "cluster_store.h"

namespace kvfs::cluster {

Result<wire::GetReply> ClusterStore::Get(const wire::GetRequest& req, std::span<uint8_t> out,
                                         std::vector<DataDigest>* digests) {
  const uint64_t chunk = ParseChunkName(req.key);
  if (chunk == 0) return Status::Invalid("not a chunk id: " + req.key.substr(0, 64));
  PeerCopy copy = CopyForPeer(chunk);
  if (!copy.layout) return Status::NotFound("chunk " + req.key + " is not held here");
  const LayoutRef& held = copy.layout;
  wire::GetReply reply;
  reply.object_size = held->size;
  // A peer's read from the start of the chunk is one access, as an open is for a local reader
  // (fuse_ops OnOpen): its holder keeps the chunk by how often any node reads it. A later piece
  // of the same read is not another access. Repair's and verify's copies start at 0 too, and
  // count as a read of the chunk.
  if (req.offset == 0 && copy.local_id != kInvalidId) local_->Touch(copy.local_id, kPeerReadStream);
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
  // A retried PUT: already here. Not a retiring copy, which is no longer held: answering for
  // it would put this node on a holder list without a copy once the grace ends.
  if (LayoutRef held = HeldLayout(chunk, /*retiring=*/false); held && held->size == data.size()) {
    return wire::PutReply{chunk, 0};
  }
  KVFS_ASSIGN_OR_RETURN(std::unique_ptr<ChunkWriter> w, local_->NewWriter(nullptr));
  if (!data.empty()) KVFS_RETURN_IF_ERROR(w->Write(0, data.data(), data.size()));
  KVFS_ASSIGN_OR_RETURN(LayoutRef layout, w->Finish());
  KVFS_RETURN_IF_ERROR(Hold(chunk, layout, 0));
  return wire::PutReply{chunk, 0};
}

}  // namespace kvfs::cluster
